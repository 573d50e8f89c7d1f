"""Tree attention without copying the KV cache.

With an explicit mask, transformers' SDPA path repeats every key/value head for grouped-query attention:
a copy of the whole cache in every layer at every step (on SmolLM2 at a 512-token cache, a third of a
4-token verify forward). Here the query heads that share a key/value head are stacked along the query
axis instead, and the mask rows are tiled to match, so attention reads the cache in place. Registered
through transformers' public AttentionInterface; the prefill (no explicit mask) uses stock SDPA.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "specviz_tree_sdpa"


def grouped_tree_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                           scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    groups = getattr(module, "num_key_value_groups", 1)
    if attention_mask is None or groups == 1 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    batch, heads, q_len, dim = query.shape
    kv_heads = heads // groups
    # heads h = k * groups + g use key/value head k: row g * q_len + i of group k is query i of head h
    packed_query = query.reshape(batch, kv_heads, groups * q_len, dim)
    packed_mask = attention_mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        packed_query, key, value, attn_mask=packed_mask, dropout_p=dropout, scale=scaling)
    return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous(), None


def install(model) -> None:
    """Switch a model whose attention is stock SDPA to the grouped tree attention."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    AttentionInterface.register(NAME, grouped_tree_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
