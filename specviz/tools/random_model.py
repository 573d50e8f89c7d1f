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


def describe(source: str, out: str) -> Path:
    """Copy the config, generation config and tokenizer files of `source` (a folder or the default
    model) into `out`, without weights."""
    from specviz.runtime.loading import resolve_model_source

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
