"""A model with another model's config and tokenizer and seeded random weights.

For a machine the real weights cannot travel to (the GPU machine takes 64 MiB per call; the default
model is 98 MB): timings depend on the shapes alone, and greedy exactness (tree verification against
one-token decoding) holds for any weights, so a random twin is what those checks need.
`describe` writes the config and tokenizer (a few MB); `materialise` adds the weights where they run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from specviz.errors import SpecvizError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


# the larger SmolLM2 Instruct models' configs as the hub publishes them (the default model's tokenizer and the
# rest of its Llama config are theirs too): their twins run here without a download
PUBLISHED = {
    "HuggingFaceTB/SmolLM2-360M-Instruct": dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                                                num_attention_heads=15, num_key_value_heads=5, rope_theta=100000.0),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                                                num_attention_heads=32, num_key_value_heads=32, rope_theta=130000.0),
}


def describe(source: str, out: str) -> Path:
    """Copy the config, generation config and tokenizer files of `source` (a folder or the default
    model) into `out`, without weights; for a model of PUBLISHED, the default model's files with its shape."""
    from specviz.runtime.loading import resolve_model_source

    if source in PUBLISHED:
        import json

        target = describe("", out)
        config = json.loads((target / "config.json").read_text())
        shape = dict(PUBLISHED[source])
        theta = shape.pop("rope_theta")
        config.update(shape, max_position_embeddings=8192, tie_word_embeddings=True, head_dim=64,
                      rope_parameters={"rope_theta": theta, "rope_type": "default"})
        (target / "config.json").write_text(json.dumps(config, indent=1))
        return target
    folder = Path(resolve_model_source(source))
    if not folder.is_dir():
        raise SpecvizError(f"'{source}' is not a local model folder: a random twin needs its config and tokenizer.")
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    for path in folder.iterdir():
        if path.is_file() and path.name not in WEIGHT_FILES and not path.name.endswith((".safetensors", ".bin")):
            shutil.copy2(path, target / path.name)
    return target


def materialise(folder: str, seed: int = 0) -> Path:
    """Write seeded random weights (the architecture's own initialisation) into a described folder."""
    from transformers import AutoConfig, AutoModelForCausalLM

    target = Path(folder)
    if (target / "model.safetensors").is_file():
        return target
    config = AutoConfig.from_pretrained(target)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(target)
    return target
