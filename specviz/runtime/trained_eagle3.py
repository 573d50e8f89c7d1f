"""The EAGLE-3-shaped head trained here (`train-head --shape eagle3`): a folder in SafeAILab/EAGLE's EAGLE-3 layout
(config.json beside model.safetensors: fc, midlayer.*, norm, lm_head, d2t, t2d; runtime.eagle_files reads it, and
runtime.eagle_head drafts with it), with specviz's record of what it was trained for in the weights file's
metadata, so that a head trained for another target is refused as the trained head's file is (runtime.draft_head).

`--draft-model head-eagle3` names it: the folder trained into the cache (SPECVIZ_HEADS or the cache's heads/) when
there is one, else the one shipped (runtime.shipped: a Space bundle's shipped/heads/, else the repository's
assets/trained/heads/<model slug>.eagle3/, `python -m specviz trained-files --eagle3-head FOLDER`). The shipped copy
is float16 and leaves lm_head out: its rows are the target's own output-embedding rows of the draft vocabulary
(frozen in training), rebuilt from the target on loading (runtime.eagle_files, LM_HEAD_METADATA), which keeps the
file under 10 MB; `export-head` writes them back for the engines, which need them."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from specviz.errors import SpecvizError
from specviz.runtime.cache_files import write_folder_atomically
from specviz.runtime.draft_head import HeadRecord, file_slug, cached_head_path, why_not_for
from specviz.runtime.eagle_files import LM_HEAD_METADATA, TARGET_ROWS
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.shipped import HEADS, shipped_folder

EAGLE3_SPEC = "head-eagle3"
EAGLE3_FORMAT = "specviz-eagle3-head"
EAGLE3_VERSION = 1
TRAIN_HINT = "train it with `python -m specviz train-head --shape eagle3`"
ARCHITECTURE = "LlamaForCausalLMEagle3"   # SafeAILab/EAGLE's and SGLang's name for the layout


def eagle3_folder_name(model_name: str) -> str:
    return f"{file_slug(model_name)}.eagle3"


def eagle3_folder(lm: LoadedModel) -> Path:
    """Where `train-head --shape eagle3` writes the target's head: the cache's folder (SPECVIZ_HEADS when set)."""
    return cached_head_path(eagle3_folder_name(lm.name))


def has_weights(folder: Path | None) -> bool:
    return folder is not None and (folder / "model.safetensors").is_file()


def shipped_eagle3_folder(model_name: str) -> Path | None:
    """The EAGLE-3 head shipped for a model (runtime.shipped), None where none is."""
    folder = shipped_folder(HEADS, eagle3_folder_name(model_name))
    return folder if has_weights(folder) else None


def eagle3_location(lm: LoadedModel) -> Path:
    """The folder `head-eagle3` reads for lm: the one trained into the cache when there is one (a head trained here
    is the one asked for), else the shipped one, else the cache's (whose absence the loader reports)."""
    trained = eagle3_folder(lm)
    if has_weights(trained):
        return trained
    return shipped_eagle3_folder(lm.name) or trained


def shown_path(path: Path) -> str:
    """path as a config shows it: under the home folder as ~/... (no user name on a page)."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def rope_fields(config) -> dict:
    """The target's rotary settings as a Llama config.json writes them (rope_theta, rope_scaling), from either
    transformers' older fields or its rope_parameters."""
    parameters = dict(getattr(config, "rope_parameters", None) or {})
    theta = parameters.pop("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    if parameters.get("rope_type", "default") == "default":
        scaling = getattr(config, "rope_scaling", None) if not parameters else None
    else:
        scaling = parameters
    return {"rope_theta": float(theta), "rope_scaling": scaling}


def folder_config(lm: LoadedModel, record: HeadRecord) -> dict:
    """config.json: a one-layer Llama with EAGLE-3's fields (draft_vocab_size, target_hidden_size)."""
    source, shape = lm.model.config, record.shape
    return {"architectures": [ARCHITECTURE], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": shape.hidden, "intermediate_size": shape.intermediate,
            "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim,
            "num_hidden_layers": 1, "max_position_embeddings": int(lm.max_context),
            "rms_norm_eps": float(getattr(source, "rms_norm_eps", 1e-6)), **rope_fields(source),
            "vocab_size": int(lm.vocab_size), "draft_vocab_size": shape.draft_vocab,
            "target_hidden_size": int(source.hidden_size), "tie_word_embeddings": False, "torch_dtype": "float32",
            "bos_token_id": getattr(source, "bos_token_id", None),
            "eos_token_id": getattr(source, "eos_token_id", None)}


def write_eagle3_folder(lm: LoadedModel, weights: dict[str, torch.Tensor], draft_ids: torch.Tensor,
                        record: HeadRecord, folder: Path, dtype: torch.dtype = torch.float32) -> Path:
    """weights (EAGLE-3's key names, floats written in dtype) with d2t and t2d, and config.json, into folder, whole
    or not at all (a retrained head replaces the old one at once). The weights carry safetensors' `format`
    (transformers' loaders want it) and specviz's record; weights without lm_head.weight are the shipped copy's,
    marked as drafting through the target's own rows (LM_HEAD_METADATA)."""
    from safetensors.torch import save_file

    draft_ids = draft_ids.cpu().long()
    t2d = torch.zeros(lm.vocab_size, dtype=torch.bool)
    t2d[draft_ids] = True
    tensors = {**{k: v.to(dtype).cpu().contiguous() for k, v in weights.items()},
               "d2t": (draft_ids - torch.arange(len(draft_ids))).contiguous(), "t2d": t2d}
    config = {**folder_config(lm, record), "torch_dtype": str(dtype).removeprefix("torch.")}
    text = json.dumps(config, indent=1)
    metadata = {"format": "pt", "specviz": record.to_json()}
    if "lm_head.weight" not in weights:
        metadata[LM_HEAD_METADATA] = TARGET_ROWS

    def write(staging: Path) -> None:
        (staging / "config.json").write_text(text)
        save_file(tensors, str(staging / "model.safetensors"), metadata=metadata)

    return write_folder_atomically(folder, write)


def read_eagle3_record(folder: Path) -> HeadRecord:
    from safetensors import safe_open

    file = folder / "model.safetensors"
    if not file.is_file():
        raise SpecvizError(f"No EAGLE-3-shaped head in '{shown_path(folder)}': {TRAIN_HINT}.")
    try:
        with safe_open(str(file), framework="pt") as f:
            record = HeadRecord.from_json((f.metadata() or {})["specviz"])
    except Exception as exc:  # safetensors, json, a missing key: not one of ours
        raise SpecvizError(f"'{shown_path(file)}' is damaged or not an EAGLE-3-shaped head trained here "
                           f"({type(exc).__name__}): {TRAIN_HINT}.") from None
    if record.format != EAGLE3_FORMAT or record.version != EAGLE3_VERSION:
        raise SpecvizError(f"'{shown_path(file)}' has format {record.format!r} version {record.version}, not an "
                           f"EAGLE-3-shaped head of this specviz: {TRAIN_HINT}.")
    return record


def checked_eagle3_folder(lm: LoadedModel, folder: Path | None = None) -> Path:
    """The EAGLE-3-shaped head's folder for lm (default: the one head-eagle3 reads, eagle3_location), checked
    against it (SpecvizError with why otherwise)."""
    folder = Path(folder) if folder is not None else eagle3_location(lm)
    if not (folder / "model.safetensors").is_file():
        raise SpecvizError(f"No EAGLE-3-shaped draft head for {lm.name} yet: {TRAIN_HINT}.")
    why = why_not_for(read_eagle3_record(folder), lm)
    if why is not None:
        raise SpecvizError(f"The EAGLE-3-shaped head '{shown_path(folder)}' cannot draft here: {why}; {TRAIN_HINT}.")
    return folder
