"""A published EAGLE head read from its files and checked against the target it is to draft for.

The layouts, as SafeAILab/EAGLE defines them (eagle/model/cnets1.py for EAGLE-1/2, cnets.py for EAGLE-3), in a
folder with `config.json` (a Llama config: hidden_size, num_attention_heads, num_key_value_heads,
intermediate_size, rms_norm_eps, rope_theta / rope_scaling, vocab_size) beside `pytorch_model.bin` or
`model.safetensors`:

- EAGLE-1/2: `fc` (hidden <- [embedding; feature], 2 hidden wide, with or without a bias) and one decoder layer
  `layers.0.*` without its input norm; no final norm, and the target's own head reads its output. It reads the
  target's final-norm features.
- EAGLE-3: `fc` (hidden <- three fused features of the target's width, no bias), one layer `midlayer.*` whose
  attention reads [input_layernorm(embedding); hidden_norm(feature)] (2 hidden wide), its own `norm` and
  `lm_head` over a draft vocabulary of `draft_vocab_size` tokens, `d2t` (draft id -> target id - draft id) and
  `t2d` (a mask over the target's vocabulary). It reads the hidden states entering the target's layers 2, N // 2
  and N - 3 (runtime.feature_tap.eagle3_tap); `target_hidden_size` in its config where its width differs.

Either may carry `embed_tokens.weight`; without it the head embeds with the target's embeddings, as EAGLE does.
An EAGLE-3 folder must carry its `lm_head.weight`, except one of specviz's own whose weights file says (metadata
LM_HEAD_METADATA) that its lm_head is the target's output-embedding rows of its draft vocabulary: the rows are
rebuilt from the target (the EAGLE-3 head the repository ships leaves them out to stay under 10 MB;
runtime.trained_eagle3). Every refusal is a SpecvizError with a sentence for the user."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch

from specviz.errors import SpecvizError
from specviz.runtime.feature_tap import FINAL, FeatureTap, eagle3_tap

EAGLE_SPEC = "eagle"  # --draft-model eagle:PATH (a folder or a hub id)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# a weights file's metadata key (and value) saying its lm_head is left out: the target's own output rows, via d2t
LM_HEAD_METADATA, TARGET_ROWS = "specviz_lm_head", "target-rows"
LAYER_PARTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


class EagleLayout(Enum):
    EAGLE1 = "EAGLE-1/2"
    EAGLE3 = "EAGLE-3"


@dataclass(frozen=True)
class EagleGeometry:
    """The head's layer: its width, attention heads, MLP width, norm epsilon and rotary settings."""
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    rope: dict  # the config's rope fields, as a LlamaConfig takes them


@dataclass(frozen=True)
class EagleFiles:
    """A head's checked contents: its layout, geometry, the target feature tap it reads, its draft vocabulary as
    target token ids (draft_vocab,), and its weights by the official key names."""
    source: str
    layout: EagleLayout
    geometry: EagleGeometry
    tap: FeatureTap
    draft_ids: torch.Tensor
    weights: dict[str, torch.Tensor]


def parse_eagle_spec(spec: str) -> str | None:
    """PATH of 'eagle:PATH', else None."""
    prefix = f"{EAGLE_SPEC}:"
    return spec[len(prefix):].strip() if spec.startswith(prefix) else None


def eagle_folder(location: str) -> Path:
    """A local folder, or a hub id fetched into (or found in) the hub's cache under its usual offline rules
    (HF_HUB_OFFLINE=1: the cache only)."""
    if not location:
        raise SpecvizError("Name the EAGLE head after 'eagle:', a folder or a hub id (eagle:yuhuili/EAGLE-...).")
    path = Path(location).expanduser()
    if path.is_dir():
        return path
    if path.exists() or location.startswith((".", "/", "~")) or location.count("/") != 1:
        raise SpecvizError(f"No EAGLE head folder at '{location}': give a folder with config.json and its weights, "
                           "or a hub id (owner/name).")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(location, allow_patterns=["config.json", *WEIGHT_FILES]))
    except Exception as exc:  # offline and not cached, unknown repository, no network: one message
        raise SpecvizError(f"The EAGLE head '{location}' could not be found locally or fetched from the hub "
                           f"({type(exc).__name__}). Download it first, or give its folder.") from None


def read_head_weights(folder: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        file = folder / name
        if not file.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                weights = load_file(str(file))
            else:
                weights = torch.load(str(file), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise SpecvizError(f"The EAGLE head's weights '{file}' are damaged or unreadable "
                               f"({type(exc).__name__}).") from None
        if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
            raise SpecvizError(f"'{file}' does not hold a state dict of tensors.")
        return weights
    raise SpecvizError(f"No weights in '{folder}': an EAGLE head has {' or '.join(WEIGHT_FILES)} beside config.json.")


def lm_head_from_target(folder: Path) -> bool:
    """Whether the folder's weights file says its lm_head is the target's output rows of its draft vocabulary
    (left out of the file: rebuilt with target_rows)."""
    file = folder / "model.safetensors"
    if not file.is_file():
        return False
    try:
        from safetensors import safe_open

        with safe_open(str(file), framework="pt") as f:
            return (f.metadata() or {}).get(LM_HEAD_METADATA) == TARGET_ROWS
    except Exception:  # damaged: read_head_weights says so
        return False


def target_rows(output_embedding: torch.Tensor | None, draft_ids: torch.Tensor, hidden: int,
                source: str) -> torch.Tensor:
    """lm_head.weight of a head that drafts through the target's own output rows: those of the draft vocabulary,
    in float32 (the rows the head was trained against, frozen)."""
    if output_embedding is None:
        raise SpecvizError(f"The EAGLE-3 head '{source}' drafts through the target's own output rows, which were "
                           "not given: load it against its target.")
    if output_embedding.dim() != 2 or output_embedding.shape[1] != hidden:
        raise SpecvizError(f"The EAGLE-3 head '{source}' is {hidden} wide; the target's output embedding is "
                           f"{tuple(output_embedding.shape)}: use a head trained for this target.")
    return output_embedding.detach().float().cpu().index_select(0, draft_ids.cpu()).contiguous()


def read_head_config(folder: Path) -> dict:
    file = folder / "config.json"
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise SpecvizError(f"No config.json in '{folder}': an EAGLE head folder has one beside its weights.") from None
    except (OSError, ValueError) as exc:
        raise SpecvizError(f"The EAGLE head's config '{file}' is damaged ({type(exc).__name__}).") from None
    if not isinstance(config, dict):
        raise SpecvizError(f"The EAGLE head's config '{file}' is not a JSON object.")
    return config


def _number(config: dict, key: str, kind=int, default=None):
    value = config.get(key, default)
    if value is None or isinstance(value, bool):
        raise SpecvizError(f"The EAGLE head's config.json lacks '{key}'.")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise SpecvizError(f"The EAGLE head's config.json has '{key}': {value!r}, not a number.") from None
    if number <= 0:
        raise SpecvizError(f"The EAGLE head's config.json has '{key}': {value!r}, not a positive number.")
    return number


def _geometry(config: dict) -> EagleGeometry:
    hidden = _number(config, "hidden_size")
    heads = _number(config, "num_attention_heads")
    kv_heads = _number(config, "num_key_value_heads", default=heads)
    head_dim = _number(config, "head_dim", default=hidden // heads)
    if heads % kv_heads:
        raise SpecvizError(f"The EAGLE head's config has {heads} attention heads over {kv_heads} key-value heads.")
    rope = {k: config[k] for k in ("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings")
            if config.get(k) is not None}
    return EagleGeometry(hidden, heads, kv_heads, head_dim, _number(config, "intermediate_size"),
                         _number(config, "rms_norm_eps", float, 1e-6), rope)


def _layout(weights: dict[str, torch.Tensor], source: str) -> EagleLayout:
    if any(k.startswith("midlayer.") for k in weights):
        return EagleLayout.EAGLE3
    if any(k.startswith("layers.0.") for k in weights) and "fc.weight" in weights:
        return EagleLayout.EAGLE1
    found = sorted({k.split(".")[0] for k in weights})[:8]
    raise SpecvizError(f"'{source}' is not an EAGLE head: its weights ({', '.join(found)}) have neither EAGLE-3's "
                       "midlayer.* nor EAGLE-1/2's fc and layers.0.*.")


def _expect(weights: dict, key: str, shape: tuple[int, ...], source: str, why: str = "") -> None:
    tensor = weights.get(key)
    if tensor is None:
        raise SpecvizError(f"The EAGLE head '{source}' lacks {key}.")
    if tuple(tensor.shape) != shape:
        raise SpecvizError(f"The EAGLE head '{source}' has {key} of shape {tuple(tensor.shape)}, not {shape}"
                           f"{why}.")
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        raise SpecvizError(f"The EAGLE head '{source}' has values that are not finite in {key}: the file is damaged.")


def _check_layer(weights: dict, prefix: str, g: EagleGeometry, attention_in: int, source: str) -> None:
    q, kv = g.heads * g.head_dim, g.kv_heads * g.head_dim
    shapes = {"self_attn.q_proj": (q, attention_in), "self_attn.k_proj": (kv, attention_in),
              "self_attn.v_proj": (kv, attention_in), "self_attn.o_proj": (g.hidden, q),
              "mlp.gate_proj": (g.intermediate, g.hidden), "mlp.up_proj": (g.intermediate, g.hidden),
              "mlp.down_proj": (g.hidden, g.intermediate)}
    for part in LAYER_PARTS:
        _expect(weights, f"{prefix}{part}.weight", shapes[part], source, " (config.json's geometry)")
    _expect(weights, f"{prefix}post_attention_layernorm.weight", (g.hidden,), source)


def read_eagle(location: str, target_hidden: int, target_vocab: int, target_layers: int,
               output_embedding: torch.Tensor | None = None) -> EagleFiles:
    """The EAGLE head at location (folder or hub id) checked against a target of that hidden size, vocabulary
    (its head's rows) and layer count; SpecvizError with the mismatch otherwise. output_embedding: the target's
    (vocab, hidden), from which a specviz folder that leaves its lm_head out gets it back."""
    folder = eagle_folder(location)
    source = str(location)
    config, weights = read_head_config(folder), read_head_weights(folder)
    layout = _layout(weights, source)
    g = _geometry(config)
    vocab = _number(config, "vocab_size")
    if vocab != target_vocab:
        raise SpecvizError(f"The EAGLE head '{source}' was made for a vocabulary of {vocab} tokens; the target's "
                           f"has {target_vocab}. Use a head trained for this target.")
    if "embed_tokens.weight" in weights:
        _expect(weights, "embed_tokens.weight", (vocab, g.hidden), source)
    if layout is EagleLayout.EAGLE1:
        if g.hidden != target_hidden:
            raise SpecvizError(f"The EAGLE head '{source}' is {g.hidden} wide; the target's features are "
                               f"{target_hidden} wide. Use a head trained for this target.")
        _expect(weights, "fc.weight", (g.hidden, 2 * g.hidden), source, " ([embedding; feature] -> hidden)")
        if "fc.bias" in weights:
            _expect(weights, "fc.bias", (g.hidden,), source)
        _check_layer(weights, "layers.0.", g, g.hidden, source)
        return EagleFiles(source, layout, g, FINAL, torch.arange(vocab), weights)
    fused = _number(config, "target_hidden_size", default=g.hidden)
    if fused != target_hidden:
        raise SpecvizError(f"The EAGLE-3 head '{source}' fuses features {fused} wide; the target's hidden states "
                           f"are {target_hidden} wide. Use a head trained for this target.")
    tap = eagle3_tap(target_layers)
    if len(tap.layers) != 3:
        raise SpecvizError(f"EAGLE-3 fuses the hidden states entering layers 2, N/2 and N-3; the target has "
                           f"{target_layers} layers, too few for three distinct ones (at least 7).")
    fc = weights.get("fc.weight")
    if fc is not None and fc.dim() == 2 and fc.shape[1] != 3 * target_hidden:
        raise SpecvizError(f"The EAGLE-3 head '{source}' has an fc over {fc.shape[1]} inputs: it fuses "
                           f"{fc.shape[1] / target_hidden:g} layers of this target's width, not 3 "
                           f"(3 x {target_hidden} = {3 * target_hidden}).")
    _expect(weights, "fc.weight", (g.hidden, 3 * target_hidden), source)
    _check_layer(weights, "midlayer.", g, 2 * g.hidden, source)
    for norm in ("midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight", "norm.weight"):
        _expect(weights, norm, (g.hidden,), source)
    draft_vocab = _number(config, "draft_vocab_size", default=vocab)
    d2t = weights.get("d2t")
    if d2t is None:
        if draft_vocab != vocab:
            raise SpecvizError(f"The EAGLE-3 head '{source}' drafts over {draft_vocab} tokens but has no d2t map.")
        draft_ids = torch.arange(vocab)
    else:
        if tuple(d2t.shape) != (draft_vocab,) or d2t.is_floating_point():
            raise SpecvizError(f"The EAGLE-3 head '{source}' has a d2t of shape {tuple(d2t.shape)} "
                               f"({d2t.dtype}), not ({draft_vocab},) integers.")
        draft_ids = torch.arange(draft_vocab) + d2t.long()
        if int(draft_ids.min()) < 0 or int(draft_ids.max()) >= vocab or len(set(draft_ids.tolist())) != draft_vocab:
            raise SpecvizError(f"The EAGLE-3 head '{source}' maps its draft tokens outside the target's vocabulary "
                               "or twice onto one token (d2t): the file is damaged or not for this target.")
    if "lm_head.weight" not in weights:
        if not lm_head_from_target(folder):
            raise SpecvizError(f"The EAGLE-3 head '{source}' lacks lm_head.weight, the rows it drafts through (only "
                               "a head specviz wrote without them, saying so in its file, takes the target's).")
        weights = {**weights, "lm_head.weight": target_rows(output_embedding, draft_ids, g.hidden, source)}
    _expect(weights, "lm_head.weight", (draft_vocab, g.hidden), source, " (draft_vocab_size x hidden_size)")
    return EagleFiles(source, layout, g, tap, draft_ids, weights)
