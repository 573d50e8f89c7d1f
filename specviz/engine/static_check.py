"""A static tree checked against reality: the drafter drafts exactly that tree (its shape of rank paths) in
real greedy sessions, and the tokens a verified step accepts are measured beside what the rank acceptance
predicted (tree.static_tree). The probe is a method of one stage that is not offered in the app: it exists
to test a tree before a serving engine is given it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specviz.drafters.model_source import MODEL_PARAMS, model_drafter
from specviz.engine.session import Session
from specviz.engine.suite import SuiteItem
from specviz.methods.base import Method
from specviz.methods.budget import Budget
from specviz.params import resolve
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.prompts import encode
from specviz.tree.static_tree import RankPath, StaticTree


class StaticTreeProbe(Method):
    """Drafts `paths` with the session's draft model (the head, a draft LM or the target's own weights)."""
    name = "static-tree"
    summary = "a drafter's static tree of rank paths (a serving engine's tree, tested here)"
    uses_draft_model = True
    paths: ClassVar[list[RankPath]] = []

    def build(self, lm, p, draft):
        drafter = model_drafter(lm, resolve(MODEL_PARAMS, {}, self.name), draft)
        if drafter is None:
            return []
        drafter.static_paths = list(self.paths)
        return [drafter]


@dataclass(frozen=True)
class StaticCheck:
    tokens: int                  # the tree's draft tokens
    predicted_accepted: float    # expected accepted draft tokens a step, from the rank acceptance
    measured_accepted: float     # accepted draft tokens a verified step, in the sessions
    steps: int
    lossless: bool               # every session emitted ar's tokens


def check_tree(lm: LoadedModel, draft, tree: StaticTree, suite: list[SuiteItem], max_new_tokens: int) -> StaticCheck:
    """Greedy sessions of the probe over the suite at a fixed budget of the tree's size, against `ar`."""
    probe = type("StaticTreeProbe", (StaticTreeProbe,), {"paths": list(tree.paths)})
    steps = tokens = 0
    lossless = True
    for item in suite:
        prompt_ids = encode(lm.tokenizer, item.messages, lm.max_context)
        limit = item.limit(max_new_tokens)
        session = Session(lm, probe, budget=Budget(tree.size), draft=draft).start_ids(prompt_ids)
        session.run(limit)
        reference = Session(lm, "ar", budget=Budget(1)).start_ids(prompt_ids)
        reference.run(limit)
        lossless = lossless and session.output_ids == reference.output_ids
        steps += len(session.records)
        tokens += sum(len(record.accepted_tokens) - 1 for record in session.records)
    return StaticCheck(tree.size, round(tree.expected_accepted, 3), round(tokens / steps, 3) if steps else 0.0,
                       steps, lossless)
