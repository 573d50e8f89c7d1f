"""What a training-time-test step of a draft head sees: the drafting view unrolled over a whole sequence at once
(EAGLE-3's training-time test), shared by both head shapes (training.train_head, training.train_eagle3)."""

from __future__ import annotations

import torch


def unrolled_mask(n: int, step: int) -> torch.Tensor:
    """Visibility (n, (step + 1) n), True = attend, of step `step`'s queries over the keys of steps 0..step:
    query t sees step 0's keys up to t - step and step j's key at t - step + j (its own draft path)."""
    t = torch.arange(n)[:, None]
    s = torch.arange(n)[None, :]
    blocks = [s <= t - step] + [s == t - step + j for j in range(1, step + 1)]
    visible = torch.cat(blocks, dim=1)
    # a query with nothing visible (t < step) would make the softmax empty: let it see its own key
    visible[:, -n:] |= torch.eye(n, dtype=torch.bool)
    return visible
