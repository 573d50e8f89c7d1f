"""A stage that runs only when it pays: on, off, or auto (the measured choice between steps with and
without it, in committed tokens per millisecond of draft + verify). unified's draft model stage: on a
CPU a draft forward costs about as much as the verify forward, and the measurement says so."""

from __future__ import annotations

from specviz.records.notes import ModelStageNote
from specviz.tree.draft_tree import DraftTree
from specviz.drafters.base import Drafter, StepOutcome
from specviz.drafters.measured_choice import FallbackChooser


class GatedDrafter(Drafter):
    def __init__(self, inner: Drafter, mode: str = "auto", setting: str = ""):
        self.inner, self.source = inner, inner.source
        self.needs_features, self.feature_tap = inner.needs_features, inner.feature_tap
        self.chooser = FallbackChooser(mode, setting, kinds=("on", "off"))
        self.used: str | None = None

    def prefill_chunk(self, context, start, logits, features=None) -> None:
        self.inner.prefill_chunk(context, start, logits, features)

    def refill(self, context, start, features) -> None:
        self.inner.refill(context, start, features)

    def extend(self, context: list[int], tree: DraftTree, budget: int) -> tuple[DraftTree, int]:
        self.used = self.chooser.choose()
        if self.used == "off":
            return tree, 0
        return self.inner.extend(context, tree, budget)

    def observe(self, outcome: StepOutcome) -> None:
        if self.used is not None:
            committed = len(outcome.verification.accepted_tokens)
            self.chooser.observe(self.used, committed, outcome.draft_ms + outcome.forward_ms, outcome.load)
        # every step, run or not: a drafter that learns the target's features needs each committed one
        self.inner.observe(outcome)

    def step_note(self) -> ModelStageNote | None:
        if self.used is None:
            return None
        note = ModelStageNote(ran=self.used == "on", choice=self.chooser.report())
        self.used = None
        return note

    def held_state(self) -> tuple:
        return self.inner.held_state()

    def checkpoint(self):
        return self.chooser.checkpoint(), self.inner.checkpoint(), self.used

    def rollback(self, saved) -> None:
        chooser, inner, self.used = saved
        self.chooser.rollback(chooser)
        self.inner.rollback(inner)
