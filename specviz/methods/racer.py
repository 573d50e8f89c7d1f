"""RACER (`racer`) and its two ablations: the Aho-Corasick retrieval tree takes the budget first, the
copy-logit logits tree the rest, merged by trie union."""

from __future__ import annotations

from specviz.accept.sampling import ACCEPTANCE_PARAM
from specviz.drafters.automaton_retrieval import RETRIEVAL_PARAMS, automaton_drafter, check_retrieval
from specviz.drafters.copy_logits import LOGITS_PARAMS, copy_logit_drafter
from specviz.methods.base import Method


class Racer(Method):
    name = "racer"
    summary = "RACER: Aho-Corasick retrieval tree first, copy-logit logits tree in the rest, merged by trie union"
    params = LOGITS_PARAMS + RETRIEVAL_PARAMS + [ACCEPTANCE_PARAM]

    @classmethod
    def check(cls, values: dict) -> None:
        check_retrieval(values)

    def build(self, lm, p, draft):
        return [automaton_drafter(p), copy_logit_drafter(lm, p)]


class RacerLogits(Method):
    name = "racer-logits"
    summary = "RACER ablation: the copy-logit logits tree alone"
    params = LOGITS_PARAMS + [ACCEPTANCE_PARAM]

    def build(self, lm, p, draft):
        return [copy_logit_drafter(lm, p)]


class RacerRetrieval(Method):
    name = "racer-retrieval"
    summary = "RACER ablation: the Aho-Corasick retrieval tree alone"
    params = RETRIEVAL_PARAMS + [ACCEPTANCE_PARAM]

    @classmethod
    def check(cls, values: dict) -> None:
        check_retrieval(values)

    def build(self, lm, p, draft):
        return [automaton_drafter(p)]
