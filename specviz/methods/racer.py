"""RACER (`racer`) and its two ablations: the Aho-Corasick retrieval tree takes the budget first, the
copy-logit logits tree the rest, merged by trie union."""

from __future__ import annotations

from specviz.accept.sampling import ACCEPTANCE_PARAM
from specviz.drafters.automaton_retrieval import RETRIEVAL_PARAMS, automaton_drafter, check_retrieval
from specviz.drafters.copy_logits import LOGITS_PARAMS, copy_logit_drafter
from specviz.methods.base import Method
from specviz.records.paper import BUDGET_WHY, Change, OwnChoice, PaperSettings
from specviz.tree.budget import AUTO_BUDGET, Budget


# the paper's own configuration (the page's *Paper's settings* button) and what stays ours
RACER_PAPER = PaperSettings("racer", "RACER, *Loss & Training* (default hyperparameters: capacity 64, breadth 8, n-grams of 10, "
                       "10,000 nodes; greedy)", (
    Change("budget", Budget(64), AUTO_BUDGET, "default hyperparameters", BUDGET_WHY),
    Change("warm_table", 0, 1, "Key Designs (the table fills from the context)", "the copy-logit table starts from the model's "
           "warm table instead of cold, so the first steps of a prompt draft too"),
    Change("draft_ahead", 0, 1, "Key Designs (matches in the context only)", "the automaton runs on its own draft past the matched n-gram, so a copy goes on"),
    Change("min_path_prob", 0.0, 0.01, "Key Designs (breadth-first, nothing cut)", "copy-logit nodes below 1% path probability are left "
           "out of the offer")), (
    OwnChoice("capacity of 64", "counts the root (63 draft tokens)", "64 draft nodes, the root apart"),
    OwnChoice("copy-logit rows never seen", "the official code drafts filler tokens", "they draft nothing"),
    OwnChoice("copy-logit rows", "from accepted tokens", "from every verified node, rejected ones too")))


class Racer(Method):
    name = "racer"
    paper = RACER_PAPER
    summary = "RACER: Aho-Corasick retrieval tree first, copy-logit logits tree in the rest, merged by trie union"
    params = LOGITS_PARAMS + RETRIEVAL_PARAMS + [ACCEPTANCE_PARAM]

    @classmethod
    def check(cls, values: dict) -> None:
        check_retrieval(values)

    def build(self, lm, p, draft):
        return [automaton_drafter(p), copy_logit_drafter(lm, p)]


class RacerLogits(Method):
    name = "racer-logits"
    paper = RACER_PAPER
    summary = "RACER ablation: the copy-logit logits tree alone"
    params = LOGITS_PARAMS + [ACCEPTANCE_PARAM]

    def build(self, lm, p, draft):
        return [copy_logit_drafter(lm, p)]


class RacerRetrieval(Method):
    name = "racer-retrieval"
    paper = RACER_PAPER
    summary = "RACER ablation: the Aho-Corasick retrieval tree alone"
    params = RETRIEVAL_PARAMS + [ACCEPTANCE_PARAM]

    @classmethod
    def check(cls, values: dict) -> None:
        check_retrieval(values)

    def build(self, lm, p, draft):
        return [automaton_drafter(p)]
