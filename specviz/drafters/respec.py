"""ReSpec (`respec`): per step, the entropy trigger decides between retrieval (feedback-scored match
positions, verified with relaxed acceptance) and a fallback drafter (the draft model, or RACER's
copy-logit tree), verified strictly. One source drafts each step."""

from __future__ import annotations

import time

import torch

from specviz.drafters.base import Drafter, StepOutcome
from specviz.drafters.copy_logits import CopyLogitDrafter
from specviz.drafters.scored_retrieval import ScoredRetriever
from specviz.drafters.entropy_trigger import EntropyTrigger, entropies
from specviz.drafters.measured_choice import FallbackChooser
from specviz.index.match_positions import MatchPositions
from specviz.records.notes import ReSpecNote
from specviz.tree.draft_tree import ROOT, DraftTree


class ReSpecDrafter(Drafter):
    source = "retrieval"  # the source of the last proposal (the method's budget split reads it)

    def __init__(self, p: dict, model: Drafter | None, setting: str = "",
                 logits: CopyLogitDrafter | None = None):
        """model: the draft model's drafter (a draft LM or the trained head); None: the copy-logit tree is
        the only fallback, whatever p['fallback'] says."""
        self.trigger = EntropyTrigger(p["lookback"], p["lambda_e"], p["entropy_threshold"])
        self.index = MatchPositions(p["lookback"])
        self.retriever = ScoredRetriever(p["alpha"], p["theta_score"], branches=3, branch_len=p["branch_len"])
        self.chooser = FallbackChooser(p["fallback"] if model is not None else "logits", setting)
        self.fallbacks: dict[str, Drafter] = {"logits": logits or CopyLogitDrafter(p["max_breadth"], None, p["min_path_prob"])}
        if model is not None:
            self.fallbacks["model"] = model
        self.needs_features = any(drafter.needs_features for drafter in self.fallbacks.values())
        self.feature_tap = (model or self).feature_tap
        self.decision = None
        self.used = None          # "retrieval", "model" or "logits" this step
        self.proposed = False     # whether this step drafted at all (no room left: it did not)
        self.draft_ms = 0.0

    def _sync(self, context: list[int]) -> None:
        self.index.feed(context[len(self.index.tokens):])

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor, features=None) -> None:
        self.trigger.record(entropies(logits))
        for drafter in self.fallbacks.values():
            drafter.prefill_chunk(context, start, logits, features)

    def refill(self, context: list[int], start: int, features: torch.Tensor) -> None:
        for drafter in self.fallbacks.values():
            drafter.refill(context, start, features)

    def propose(self, context: list[int], budget: int) -> DraftTree:
        started = time.perf_counter()
        self.proposed = True
        self._sync(context)
        self.decision = self.trigger.decide(context, lambda key: len(self.index.positions(key)))
        tree = None
        self.retriever.selected = []
        if self.decision.fired and self.retriever.select(self.index, self.decision.key):
            tree, self.used = self.retriever.tree(context[-1], budget), "retrieval"
        else:
            self.used = self.chooser.choose()
            tree = self.fallbacks[self.used].propose(context, budget)
        self.source = self.used
        self.draft_ms = (time.perf_counter() - started) * 1000
        return tree

    def observe(self, outcome: StepOutcome) -> None:
        committed = len(outcome.context) - len(self.trigger.history)
        rows = [ROOT] + outcome.verification.path[:committed - 1]
        top = outcome.verification.top
        if top is not None and top.entropies is not None:  # the native logits pass computed them
            self.trigger.record(top.entropies[rows].tolist())
        else:
            self.trigger.record(entropies(outcome.logits.index_select(
                0, torch.tensor(rows, device=outcome.logits.device))))
        if self.proposed and self.used == "retrieval":
            self.retriever.feedback(outcome.tree, outcome.verification.accepted_draft_tokens)
        elif self.proposed:
            self.chooser.observe(self.used, committed, self.draft_ms + outcome.forward_ms, outcome.load)
        for drafter in self.fallbacks.values():
            drafter.observe(outcome)

    def held_state(self) -> tuple:
        return tuple(held for fallback in self.fallbacks.values() for held in fallback.held_state())

    def checkpoint(self):
        return (len(self.trigger.history), dict(self.retriever.scores), self.chooser.checkpoint(),
                {kind: drafter.checkpoint() for kind, drafter in self.fallbacks.items()})

    def rollback(self, saved) -> None:
        history, scores, chooser, fallbacks = saved
        del self.trigger.history[history:]
        self.retriever.scores = scores
        self.chooser.rollback(chooser)
        for kind, drafter in self.fallbacks.items():
            drafter.rollback(fallbacks[kind])
        self.proposed = False

    def step_note(self) -> ReSpecNote | None:
        if not self.proposed:
            return None
        self.proposed = False
        return ReSpecNote(trigger=self.decision, drafted_by=self.used, fallback=self.chooser.report(),
                          retrieval=self.retriever.report() if self.decision.fired else None)
