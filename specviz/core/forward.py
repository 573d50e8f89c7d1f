"""The verify forward: a draft tree (or any token block) through the target in one pass with tree attention."""

from __future__ import annotations

import torch

from specviz.core.tree import DraftTree


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(q, kv) bool visibility (True = attend) as the additive 4D mask (1, 1, q, kv) every attention
    backend accepts: 0 / finfo.min in the model dtype (a 0/1 float mask would be silently wrong)."""
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask.view(1, 1, *visible.shape)


def tree_visibility(tree: DraftTree, past_len: int) -> torch.Tensor:
    """(q, past + q) bool: every node sees the whole cache and its own ancestors (tree attention)."""
    visible = torch.ones((len(tree), past_len + len(tree)), dtype=torch.bool)
    visible[:, past_len:] = torch.from_numpy(tree.ancestor_mask())
    return visible


@torch.inference_mode()
def masked_forward(model, cache, tokens: list[int], positions: list[int], visible: torch.Tensor) -> torch.Tensor:
    """Logits (q, vocab) of q tokens at the given positions, each attending to the cache entries and
    new tokens its row of visible (q, cache + q) allows; the cache grows by q entries."""
    device = model.device
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    position_ids = torch.tensor([positions], dtype=torch.long, device=device)
    lean = getattr(model, "_specviz_lean", None)  # core.lean_forward, where the model is Llama-shaped
    if lean is not None:
        return lean(input_ids, position_ids, additive_mask(visible.to(device), model.dtype)[0, 0], cache)
    out = model(input_ids=input_ids, position_ids=position_ids,
                attention_mask=additive_mask(visible.to(device), model.dtype),
                past_key_values=cache, use_cache=True)
    return out.logits[0].float()


def tree_forward(model, cache, tree: DraftTree, past_len: int) -> torch.Tensor:
    """Logits (q, vocab) for every tree node, root first; the cache grows by q entries."""
    return masked_forward(model, cache, tree.tokens, [past_len + d for d in tree.depths],
                          tree_visibility(tree, past_len))
