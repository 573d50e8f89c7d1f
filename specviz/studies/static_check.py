"""A static tree checked against reality: the drafter drafts exactly that tree (its shape of rank paths) in
real greedy sessions, and the tokens a verified step accepts are measured beside what the rank acceptance
predicted (tree.static_tree). The probes are methods of one stage that are not offered in the app: they exist
to test a tree before a serving engine is given it. An engine's dynamic EAGLE tree (engine_configs.eagle_tree) is
checked the same way: the head drafts by EAGLE-2's rule at the engine's settings, with the drafter's own scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specviz.drafters.model_source import MODEL_PARAMS, model_drafter
from specviz.engine.session import Session
from specviz.studies.suite import SuiteItem
from specviz.methods.base import Method
from specviz.tree.budget import Budget
from specviz.params import resolve
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.prompts import encode
from specviz.engine_configs.advice import EngineAdvice
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


class EagleRuleProbe(Method):
    """Drafts with the session's head by EAGLE-2's rule as SGLang and TensorRT-LLM run it: `steps` levels, the
    best `topk` nodes of a level expanded into their `topk` best children, the best `drafts` nodes kept, no
    level cut short (the head drafter's path-chance floor is off)."""
    name = "eagle-rule"
    summary = "a head drafting by a serving engine's dynamic EAGLE rule (tested here)"
    uses_draft_model = True
    steps: ClassVar[int] = 1
    topk: ClassVar[int] = 1
    drafts: ClassVar[int] = 1

    def build(self, lm, p, draft):
        settings = {"head_breadth": self.topk, "head_expand": self.topk, "head_depth": self.steps,
                    "head_nodes": self.drafts}
        drafter = model_drafter(lm, resolve(MODEL_PARAMS, settings, self.name), draft)
        if drafter is None:
            return []
        drafter.min_path_chance = 0.0
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
    return _measured(lm, draft, probe, tree.size, tree.expected_accepted, suite, max_new_tokens)


def check_engine(lm: LoadedModel, draft, advice: EngineAdvice, suite: list[SuiteItem],
                 max_new_tokens: int) -> StaticCheck | None:
    """What an engine's advice drafts a step (its static tree, or its dynamic EAGLE rule with a head: a draft
    model has no such rule here), drafted in greedy sessions, against the accepted drafts the advice predicted.
    None where the engine refused the drafter or the rule needs a head this drafter is not."""
    from specviz.runtime.eagle_head import drafts_from_features

    shape = advice.shape
    if shape is None:
        return None
    if shape.paths:
        probe = type("StaticTreeProbe", (StaticTreeProbe,), {"paths": list(shape.paths)})
        return _measured(lm, draft, probe, len(shape.paths), advice.predicted_accepted, suite, max_new_tokens)
    if not drafts_from_features(draft):
        return None
    probe = type("EagleRuleProbe", (EagleRuleProbe,), {"steps": shape.steps, "topk": shape.topk,
                                                        "drafts": shape.drafts})
    return _measured(lm, draft, probe, shape.drafts, advice.predicted_accepted, suite, max_new_tokens)


def _measured(lm: LoadedModel, draft, probe: type, size: int, predicted: float, suite: list[SuiteItem],
              max_new_tokens: int) -> StaticCheck:
    steps = tokens = 0
    lossless = True
    for item in suite:
        prompt_ids = encode(lm.tokenizer, item.messages, lm.max_context)
        limit = item.limit(max_new_tokens)
        session = Session(lm, probe, budget=Budget(size), draft=draft).start_ids(prompt_ids)
        session.run(limit)
        reference = Session(lm, "ar", budget=Budget(1)).start_ids(prompt_ids)
        reference.run(limit)
        lossless = lossless and session.output_ids == reference.output_ids
        steps += len(session.records)
        tokens += sum(len(record.accepted_tokens) - 1 for record in session.records)
    return StaticCheck(size, round(predicted, 3), round(tokens / steps, 3) if steps else 0.0, steps, lossless)
