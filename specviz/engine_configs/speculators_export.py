"""An EAGLE-3 head written for the engines: the `speculators` package's eagle3 format (what `vllm serve DIR` reads
by itself), or EAGLE-3's own layout (SafeAILab/EAGLE's, what SGLang and TensorRT-LLM load, and vLLM with
`--speculative-config`).

The speculators format, as read from vllm-project/speculators (src/speculators/models/eagle3/config.py and core.py,
main at c05b95b3, 2026-08) and vLLM's reader (vllm/transformers_utils/configs/speculators/, llama_eagle3.py):

- config.json: `speculators_model_type` "eagle3", `transformer_layer_config` (the layer's Llama config, with its
  `model_type`), `draft_vocab_size`, `norm_before_residual` (written: vLLM takes a missing one as true, speculators
  as false; this head's residual is fc's raw output, false), `eagle_aux_hidden_state_layer_ids` (the target layers
  whose inputs it fuses), and `speculators_config` (algorithm, one greedy proposal of `speculative_tokens`, the
  verifier's name and architectures: vLLM serves the verifier). No top-level `model_type`: vLLM recognises the
  format by its absence.
- model.safetensors (metadata format "pt"): fc, `layers.0.*` (hidden_norm inside the layer), norm, lm_head, and d2t
  (int64) and t2d (bool) when the draft vocabulary is smaller than the target's, and embed_tokens, the target's
  own embedding: vLLM would take the verifier's without it, but speculators' loader (0.9.0, transformers 5.19)
  leaves a missing one at zeros (it fills only NaN ones from the verifier).

SGLang reads only EAGLE-3's own layout (`midlayer.*`, architectures LlamaForCausalLMEagle3); the head trained here
is cached in that layout (runtime.trained_eagle3), so its folder is written again as it is, its floats in the dtype
asked for. The head the repository ships leaves its lm_head out (the target's own rows of its draft vocabulary):
both formats write it back from the target's output embedding, since every engine reads the head's own."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.errors import SpecvizError
from specviz.runtime.cache_files import write_folder_atomically

FORMATS = ("speculators", "eagle3")
# the release whose format this writes (its loader reads an export in tests/test_engines_own_code.py)
SPECULATORS_VERSION = "0.9.0"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LAYER_CONFIG_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                       "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "max_position_embeddings",
                       "vocab_size", "bos_token_id", "eos_token_id")


@dataclass(frozen=True)
class Verifier:
    """The target the head drafts for, as an engine names it: a hub id or path, its architectures, the layers
    whose inputs the head fuses, and the engines' default for those (2, N // 2, N - 3)."""
    name_or_path: str
    architectures: tuple[str, ...]
    aux_layers: tuple[int, ...]
    default_aux_layers: tuple[int, ...] = ()


def speculators_config(eagle3_config: dict, verifier: Verifier, speculative_tokens: int, dtype: str) -> dict:
    """The speculators config.json for an EAGLE-3 head whose own config.json is eagle3_config."""
    layer = {k: eagle3_config[k] for k in LAYER_CONFIG_FIELDS if k in eagle3_config}
    layer.update(model_type="llama", architectures=["LlamaForCausalLM"], num_hidden_layers=1,
                 attention_bias=False, mlp_bias=False, tie_word_embeddings=False)
    vocab = int(eagle3_config["vocab_size"])
    config = {"architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3",
            "speculators_version": SPECULATORS_VERSION,
            "draft_vocab_size": int(eagle3_config.get("draft_vocab_size") or vocab),
            "norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
            "target_hidden_size": eagle3_config.get("target_hidden_size"),
            # written only where they differ from the default: vLLM reads explicit ids as the inputs of those layers,
            # SGLang as the outputs of the layers before (it adds one), and every engine's default is the same
            "eagle_aux_hidden_state_layer_ids": None if verifier.aux_layers == verifier.default_aux_layers
            else list(verifier.aux_layers),
            "tie_word_embeddings": False, "torch_dtype": dtype, "transformer_layer_config": layer,
            "speculators_config": {
                "algorithm": "eagle3",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": int(speculative_tokens),
                                      "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": verifier.name_or_path, "architectures": list(verifier.architectures)}}}
    if config["eagle_aux_hidden_state_layer_ids"] is None:
        del config["eagle_aux_hidden_state_layer_ids"]
    return config


def speculators_weights(weights: dict[str, torch.Tensor], vocab: int, dtype: torch.dtype,
                        embedding: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """EAGLE-3's weights (midlayer.*) under speculators' names (layers.0.*), floats in dtype; d2t and t2d kept
    only for a draft vocabulary smaller than the target's; embed_tokens the head's own, else `embedding` (the
    target's)."""
    weights = dict(weights)
    if "embed_tokens.weight" not in weights and embedding is not None:
        weights["embed_tokens.weight"] = embedding.detach().cpu()
    out = {}
    for key, tensor in weights.items():
        name = "layers.0." + key[len("midlayer."):] if key.startswith("midlayer.") else key
        if key == "d2t":
            tensor = tensor.long()
        elif key == "t2d":
            tensor = tensor.bool()
        else:
            tensor = tensor.to(dtype)
        out[name] = tensor.contiguous()
    lm_head = out.get("lm_head.weight")
    if lm_head is not None and lm_head.shape[0] == vocab:
        out.pop("d2t", None)
        out.pop("t2d", None)
    return out


def with_lm_head(source: Path, config: dict, weights: dict[str, torch.Tensor],
                 output_embedding: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """weights with their lm_head: their own, or for a specviz folder that leaves it out (runtime.eagle_files'
    LM_HEAD_METADATA) the target's output rows of the draft vocabulary (d2t)."""
    from specviz.runtime.eagle_files import lm_head_from_target, target_rows

    if "lm_head.weight" in weights:
        return weights
    if not lm_head_from_target(source):
        raise SpecvizError(f"The EAGLE-3 head '{source}' lacks lm_head.weight, the rows it drafts through: no engine "
                           "could draft with it.")
    d2t = weights.get("d2t")
    draft_ids = torch.arange(int(config["vocab_size"])) if d2t is None else torch.arange(len(d2t)) + d2t.long()
    return {**weights, "lm_head.weight": target_rows(output_embedding, draft_ids, int(config["hidden_size"]),
                                                     str(source))}


def _in_dtype(weights: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Floats in dtype; d2t as int64 and t2d as bool, as every engine reads them."""
    kinds = {"d2t": torch.long, "t2d": torch.bool}
    return {k: v.to(kinds.get(k, dtype)).contiguous() for k, v in weights.items()}


def _specviz_record(source: Path) -> dict[str, str]:
    """The specviz record in the source's weights file, as metadata to keep ({} where there is none)."""
    from safetensors import safe_open

    file = source / "model.safetensors"
    if not file.is_file():
        return {}
    with safe_open(str(file), framework="pt") as f:
        record = (f.metadata() or {}).get("specviz")
    return {"specviz": record} if record else {}


def export_head(source: Path, out: Path, format: str, verifier: Verifier, speculative_tokens: int = 3,
                dtype: str = "float32", embedding: torch.Tensor | None = None,
                output_embedding: torch.Tensor | None = None) -> list[Path]:
    """The EAGLE-3 head folder `source` (EAGLE-3's layout, read by runtime.eagle_files) written to `out` in
    `format`; the files written. `out` must be empty or new. embedding: the target's input embedding (vocab,
    hidden), written as the speculators head's embed_tokens where the head has none of its own; output_embedding:
    the target's output embedding, whose rows a head shipped without its lm_head gets back (with_lm_head)."""
    from safetensors.torch import save_file

    from specviz.runtime.eagle_files import read_head_config, read_head_weights

    if format not in FORMATS:
        raise SpecvizError(f"No export format {format!r}: choose one of {', '.join(FORMATS)}.")
    if dtype not in DTYPES:
        raise SpecvizError(f"No dtype {dtype!r}: choose one of {', '.join(DTYPES)}.")
    if not 1 <= int(speculative_tokens) <= 64:
        raise SpecvizError(f"--speculative-tokens must be 1 to 64, not {speculative_tokens}.")
    out = Path(out)
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise SpecvizError(f"'{out}' exists and is not an empty folder: name a new one.")
    config, weights = read_head_config(source), read_head_weights(source)
    if not any(k.startswith("midlayer.") for k in weights):
        raise SpecvizError(f"'{source}' is not an EAGLE-3 head (no midlayer.* weights): only EAGLE-3 heads export.")
    weights = with_lm_head(source, config, weights, output_embedding)
    if format == "eagle3":
        tensors = _in_dtype(weights, DTYPES[dtype])
        text = json.dumps({**config, "torch_dtype": dtype}, indent=1)
        metadata = {"format": "pt", **_specviz_record(source)}

        def write_eagle3(staging: Path) -> None:
            (staging / "config.json").write_text(text)
            save_file(tensors, str(staging / "model.safetensors"), metadata=metadata)

        return _written(out, write_eagle3, ["config.json", "model.safetensors"])
    if embedding is not None and tuple(embedding.shape) != (int(config["vocab_size"]), int(config["hidden_size"])):
        raise SpecvizError(f"The target's embedding is {tuple(embedding.shape)}, not the head's vocabulary by its "
                           "width: this head was made for another target.")
    tensors = speculators_weights(weights, int(config["vocab_size"]), DTYPES[dtype], embedding)
    text = json.dumps(speculators_config(config, verifier, speculative_tokens, dtype), indent=1)

    def write(staging: Path) -> None:
        (staging / "config.json").write_text(text)
        save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})

    return _written(out, write, ["config.json", "model.safetensors"])


def _written(out: Path, write, names: list[str]) -> list[Path]:
    """The files `write(folder)` makes, put at out whole or not at all, readable by the engine's user too."""
    if out.is_dir():
        out.rmdir()   # empty (checked): the whole folder takes its place
    write_folder_atomically(out, write)
    out.chmod(0o755)
    for name in names:
        (out / name).chmod(0o644)
    return [out / name for name in names]
