"""The small interface every draft source implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from specviz.accept.verification import Verification
from specviz.records.notes import DrafterNote
from specviz.runtime.feature_tap import FINAL
from specviz.tree.draft_tree import DraftTree


@dataclass
class StepOutcome:
    """What a drafter may learn from after a verified step."""
    tree: DraftTree
    verification: Verification
    logits: torch.Tensor          # target logits (q, vocab) for every tree node
    context: list[int]            # committed tokens after the step (prompt + output; last = next root)
    forward_ms: float = 0.0       # the target's verify forward
    features: torch.Tensor | None = None  # the target's features (q, width) per node, when a stage needs_features
    draft_ms: float = 0.0         # the whole draft stage of the step
    load: float = 1.0             # forward_ms / the calibrated curve's cost of this tree (1: no curve loaded)
    cost_ms: Callable[[int], float] | None = None  # the calibrated curve: ms of a verify forward of n nodes (None: none)


class Drafter:
    """A draft source. `propose` drafts on its own; `extend` is how a stage of a method's pipeline uses
    it: by default the proposal joins the tree built so far by trie union, and a drafter that needs to
    see that tree (READER's deepening) overrides it.

    State and the all-or-nothing step: `propose` may only bring derived indexes up to date with the
    committed context (feeding tokens it has not seen yet); what a drafter learns from a step happens
    in `observe`, and a drafter whose `observe` changes anything returns in `checkpoint()` what
    `rollback()` needs to undo it, so that a step that fails anywhere leaves the drafter as it was."""

    source = "retrieval"
    needs_features = False  # whether it drafts from the target's features (the session then computes them)
    feature_tap = FINAL     # which of the target's hidden states it reads (runtime.feature_tap; EAGLE-3: three layers)

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor,
                      features: torch.Tensor | None = None) -> None:
        """logits[i] is the target's prediction after context[start + i] (prefill, in chunks); features[i]
        the target's feature there (runtime.block_forward), given when needs_features."""

    def refill(self, context: list[int], start: int, features: torch.Tensor) -> None:
        """The target's features of context[start:] again, chunk by chunk from the start, when the session rebuilt
        its KV cache after travelling without it (runtime.state_pickle); only a drafter that left behind what it
        derived from them (the head's cache) needs them."""

    def held_state(self) -> tuple:
        """The caches and tensors this drafter keeps of its session, whose memory grows with the context
        (engine.held_memory counts them, and trims the caches at rest); shared weights and tables are not."""
        return ()

    def propose(self, context: list[int], budget: int) -> DraftTree:
        """A tree of at most budget draft nodes under the root context[-1]."""
        raise NotImplementedError

    def extend(self, context: list[int], tree: DraftTree, budget: int) -> tuple[DraftTree, int]:
        """The tree so far grown by at most budget of this drafter's nodes, and how many it proposed."""
        proposal = self.propose(context, budget)
        if tree.num_drafted == 0 and not tree.draft_dists:
            return proposal, proposal.num_drafted  # nothing to merge into: the proposal is the tree
        return tree.merge(proposal), proposal.num_drafted

    def observe(self, outcome: StepOutcome) -> None:
        """Learn from the verified step (acceptance feedback, new tokens, new logits)."""

    def finish(self, output_ids: list[int]) -> None:
        """A generation ended with these output tokens (a drafter that remembers earlier answers keeps them)."""

    def step_note(self) -> DrafterNote | None:
        """What the step record should show about this drafter's last step (decisions, feedback), read
        once after observe(); None: nothing to say."""
        return None

    def checkpoint(self):
        """What rollback() needs to undo this step's observe(); None for a drafter that learns nothing."""
        return None

    def rollback(self, saved) -> None:
        """Undo everything since checkpoint() returned saved."""
