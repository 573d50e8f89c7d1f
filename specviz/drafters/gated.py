"""A stage that runs only when it pays: on, off, or auto (drafters.stage_gain: what it added on the steps it ran,
per millisecond of its drafting and of the verify forward of its own nodes, against the run's rate without it).
unified's draft model stage: on a CPU a draft forward costs a good part of a verify forward, and on text the other
sources already copy it adds nothing."""

from __future__ import annotations

import time

from specviz.records.notes import ModelStageNote
from specviz.tree.draft_tree import DraftTree
from specviz.drafters.base import Drafter, StepOutcome
from specviz.drafters.stage_gain import StageGain, stage_added


class GatedDrafter(Drafter):
    def __init__(self, inner: Drafter, mode: str = "auto", setting: str = "", seeded: tuple[str, ...] = ()):
        """seeded: the sources whose nodes exist only because this stage drafted (READER's deepening below its
        branch): what they add counts as the stage's."""
        self.inner, self.source = inner, inner.source
        self.needs_features, self.feature_tap = inner.needs_features, inner.feature_tap
        self.gate = StageGain(mode, setting)
        self.own = frozenset((inner.source, *seeded))
        self.used: str | None = None
        self.drafting_ms = 0.0

    def prefill_chunk(self, context, start, logits, features=None) -> None:
        self.inner.prefill_chunk(context, start, logits, features)

    def refill(self, context, start, features) -> None:
        self.inner.refill(context, start, features)

    def extend(self, context: list[int], tree: DraftTree, budget: int) -> tuple[DraftTree, int]:
        self.used = self.gate.choose()
        if self.used == "off":
            self.drafting_ms = 0.0
            return tree, 0
        started = time.perf_counter()
        try:
            return self.inner.extend(context, tree, budget)
        finally:
            self.drafting_ms = (time.perf_counter() - started) * 1000

    def observe(self, outcome: StepOutcome) -> None:
        if self.used is not None:
            ran = self.used == "on"
            committed = len(outcome.verification.accepted_tokens)
            added, nodes = stage_added(outcome.tree, outcome.verification.path, self.own) if ran else (0, 0)
            stage_ms = self.drafting_ms
            if ran and nodes and outcome.cost_ms is not None:  # its nodes' share of the verify forward, as it ran
                q = len(outcome.tree)
                stage_ms += max(0.0, outcome.cost_ms(q) - outcome.cost_ms(q - nodes)) * outcome.load
            self.gate.observe(ran, committed, outcome.draft_ms + outcome.forward_ms, added, stage_ms, outcome.load)
        # every step, run or not: a drafter that learns the target's features needs each committed one
        self.inner.observe(outcome)

    def step_note(self) -> ModelStageNote | None:
        if self.used is None:
            return None
        note = ModelStageNote(ran=self.used == "on", choice=self.gate.report())
        self.used = None
        return note

    def held_state(self) -> tuple:
        return self.inner.held_state()

    def checkpoint(self):
        return self.gate.checkpoint(), self.inner.checkpoint(), self.used, self.drafting_ms

    def rollback(self, saved) -> None:
        gate, inner, self.used, self.drafting_ms = saved
        self.gate.rollback(gate)
        self.inner.rollback(inner)
