"""The small interface every draft source implements."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.tree import DraftTree
from specviz.verify import Verification


@dataclass
class StepOutcome:
    """What a drafter may learn from after a verified step."""
    tree: DraftTree
    verification: Verification
    logits: torch.Tensor          # target logits (q, vocab) for every tree node
    context: list[int]            # committed tokens after the step (prompt + output; last = next root)
    forward_ms: float = 0.0       # the target's verify forward


class Drafter:
    source = "retrieval"

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor) -> None:
        """logits[i] is the target's prediction after context[start + i] (prefill, in chunks)."""

    def propose(self, context: list[int], budget: int) -> DraftTree:
        """A tree of at most budget draft nodes under the root context[-1]."""
        raise NotImplementedError

    def observe(self, outcome: StepOutcome) -> None:
        """Learn from the verified step (acceptance feedback, new tokens, new logits)."""

    def step_notes(self) -> dict:
        """What the step record should show about this drafter's last step (decisions, feedback)."""
        return {}
