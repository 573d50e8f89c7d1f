"""A visibility matrix as the additive mask attention takes, for every forward that builds one (runtime.block_forward,
the static forwards of runtime.captured_forward and runtime.captured_head, the draft head)."""

from __future__ import annotations

import torch


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(q, kv) bool visibility (True = attend) as the additive 4D mask (1, 1, q, kv) every attention
    backend accepts: 0 / finfo.min in the model dtype (a 0/1 float mask would be silently wrong)."""
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask.view(1, 1, *visible.shape)
