"""What one verify forward gives: the tree's logits, the target's features where a drafter reads them, and the
top-k summary of the logits that the captured forward made on the device (runtime.captured_forward), which
acceptance reads instead of summarising the logits again on the host (accept.verification.LogitTop)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class DeviceSummary:
    """One row per tree node, root first (n, 2k + 4) float32, as runtime.captured_forward.summarise lays it out:
    the row's top-k logits and their ids (as floats, exact below 2^24), its log-normaliser, then the node's own
    token's logit under its parent's row, its rank there and the row's entropy in nats."""
    rows: np.ndarray


@dataclass(frozen=True)
class VerifyOutput:
    """engine.tree_forward.verify_tree's result; the session hands `summary` to the method's acceptance rule."""
    logits: torch.Tensor                     # (n, vocab) fp32, root first
    features: torch.Tensor | None = None     # (n, width) where asked for
    summary: DeviceSummary | None = None     # made on the device by the captured forward; None elsewhere
