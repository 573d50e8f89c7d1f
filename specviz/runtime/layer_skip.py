"""A self-drafter that skips layers: the target's own weights, only its first k decoder layers, then the
final norm and the head (self-speculative decoding as in Draft & Verify / LayerSkip). No second copy of
the weights; the drafter keeps its own small KV cache of k layers.

It stands in for a model wherever the engine calls one (`masked_forward`, DynamicCache(config=...)):
a module with the target's device and dtype, a config that says k layers, and a forward that returns
an object with `.logits`. Works for the Llama-shaped decoders of transformers (model.model.embed_tokens,
.layers, .norm, .rotary_emb; model.lm_head): SmolLM, Llama, Mistral, Qwen2 and the like.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from specviz.runtime.loading import LoadedModel
from specviz.errors import SpecvizError

PREFIX = "self-skip:"


@dataclass
class _Output:
    logits: torch.Tensor


class FirstLayersModel(torch.nn.Module):
    def __init__(self, target: torch.nn.Module, layers: int):
        super().__init__()
        inner = getattr(target, "model", None)
        if not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")) \
                or not hasattr(target, "lm_head"):
            raise SpecvizError(f"{type(target).__name__} is not a Llama-shaped decoder: self-skip drafting "
                               "needs model.embed_tokens / layers / norm / rotary_emb and lm_head.")
        total = len(inner.layers)
        if not 1 <= layers < total:
            raise SpecvizError(f"self-skip needs between 1 and {total - 1} layers (the model has {total}), "
                               f"got {layers}.")
        self.target = [target]   # a list: not registered as a submodule (no second parameter listing)
        self.layers = layers
        self.config = copy.copy(target.config)
        self.config.num_hidden_layers = layers

    @property
    def device(self) -> torch.device:
        return self.target[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.target[0].dtype

    def get_output_embeddings(self):
        return self.target[0].get_output_embeddings()

    def forward(self, input_ids, position_ids, attention_mask, past_key_values, use_cache=True, **_):
        target = self.target[0]
        inner = target.model
        hidden = inner.embed_tokens(input_ids)
        rotary = inner.rotary_emb(hidden, position_ids=position_ids)
        for layer in inner.layers[:self.layers]:
            hidden = layer(hidden, attention_mask=attention_mask, position_embeddings=rotary,
                           position_ids=position_ids, past_key_values=past_key_values, use_cache=True)
        return _Output(logits=target.lm_head(inner.norm(hidden)))


def parse_self_skip(spec: str) -> int | None:
    """'self-skip:8' -> 8; None when spec names no self-skip drafter."""
    spec = (spec or "").strip()
    if not spec.startswith(PREFIX):
        return None
    text = spec[len(PREFIX):]
    if not text.isdigit():
        raise SpecvizError(f"'{spec}': write self-skip:K with K the number of layers to keep, e.g. self-skip:8.")
    return int(text)


def self_skip_model(lm: LoadedModel, layers: int) -> LoadedModel:
    return LoadedModel(model=FirstLayersModel(lm.model, layers), tokenizer=lm.tokenizer,
                       name=f"{lm.name} {PREFIX}{layers}", device=lm.device, dtype=lm.dtype,
                       eos_ids=lm.eos_ids, max_context=lm.max_context)
