"""`unified`: every source in one tree. The draft model's tree first (a stage that runs only when it
pays on this machine), then RACER's Aho-Corasick retrieval tree, READER's searched branch (short-term
trie + datastore) and READER's deepening below the model's best prefix, and the copy-logit logits tree
in the budget left; the cost-optimal planner keeps the nodes that pay. Strict verification: lossless."""

from __future__ import annotations

from specviz.accept.sampling import ACCEPTANCE_PARAM
from specviz.params import Param
from specviz.drafters.automaton_retrieval import RETRIEVAL_PARAMS, automaton_drafter, check_retrieval
from specviz.drafters.copy_logits import LOGITS_PARAMS, copy_logit_drafter
from specviz.drafters.model_source import MODEL_PARAMS, draft_note, drafter_setting, model_drafter
from specviz.drafters.gated import GatedDrafter
from specviz.drafters.search_path import SEARCH_PARAMS, search_drafters, search_indexes
from specviz.methods.base import Method


class Unified(Method):
    name = "unified"
    summary = ("all three sources in one tree: Aho-Corasick retrieval + READER's trie/datastore branch, the "
               "draft model (when it pays), and the copy-logit tree, pruned by the cost-optimal planner")
    params = (LOGITS_PARAMS + RETRIEVAL_PARAMS + SEARCH_PARAMS + MODEL_PARAMS
              + [Param("model_stage", "auto", 0, 0, str, "unified: run the draft model stage always (on), never "
                                                         "(off), or when it measured faster here (auto)",
                       choices=("auto", "on", "off")), ACCEPTANCE_PARAM])
    uses_draft_model = True
    state_only = {"model_stage": "on"}  # auto measures which pays, and the process keeps that measurement

    merged: tuple[type[Method], ...] = ()  # the mergeable methods whose sources a switch adds (merge)

    @classmethod
    def merge(cls, methods) -> None:
        """Offer each mergeable method's source as a stage of this tree, off by default (`with_<name>` = 1 turns it
        on): the registry calls this once, so a new retrieval method joins without an edit here. Its parameters
        join ours (a name both declare is declared once: tests/test_methods.py)."""
        own = {p.name for p in cls.params}
        for method in methods:
            if method in cls.merged:
                continue
            switch = Param(f"with_{method.name}", 0, 0, 1, int, f"unified: 1 = also merge {method.name}'s source "
                                                               f"into the tree (before the copy-logit tree)")
            cls.params = cls.params + [switch] + [p for p in method.params if p.name not in own]
            own |= {p.name for p in method.params}
            cls.merged = cls.merged + (method,)

    @classmethod
    def check(cls, values: dict) -> None:
        check_retrieval(values)
        for method in cls.merged:
            method.check(values)

    def build(self, lm, p, draft):
        self.indexes = search_indexes(lm, p)
        self.notes = draft_note(draft) if p["model_stage"] != "off" else []
        inner = model_drafter(lm, p, draft, (self.sampling, self.noise))
        model = ([GatedDrafter(inner, p["model_stage"], drafter_setting(lm, draft, p), seeded=("deepen",))]
                 if inner is not None else [])
        # a step that runs the model stage has paid for its draft forwards, so its small tree drafts first:
        # after the automaton (which can fill a 64-node offer alone) it often found no room, and its nodes
        # came behind retrieval siblings that took the planner's share of their parent. The copy-logit
        # tree fills whatever budget it is offered, so it drafts last. With the stage off, the other
        # stages draft as before.
        merged = [d for m in self.merged if p[f"with_{m.name}"] for d in m.sources(lm, p)]
        return [*model, automaton_drafter(p), *search_drafters(self.indexes, p), *merged, copy_logit_drafter(lm, p)]

    @property
    def warnings(self) -> list[str]:
        return self.notes + self.indexes.warnings

    def finish(self, output_ids: list[int]) -> None:
        super().finish(output_ids)
        self.indexes.finish(output_ids)
