"""RACER (`racer`) and its two ablations: the Aho-Corasick retrieval tree takes the budget first, the
copy-logit logits tree the rest, merged by trie union."""

from __future__ import annotations

from specviz.params import Param
from specviz.drafters.automaton_retrieval import AutomatonDrafter
from specviz.drafters.copy_logits import CopyLogitDrafter
from specviz.errors import SpecvizError
from specviz.methods.base import Method

LOGITS_PARAMS = [
    Param("max_breadth", 8, 1, 16, int, "logits tree: children of the root (b_0); deeper nodes get b_i / 2^(j+1)"),
    Param("min_path_prob", 0.01, 0.0, 1.0, float, "logits tree: a node whose path probability (the copy-logit "
                                                  "probabilities from the root down to it, multiplied) is below "
                                                  "this is left out of the offer; it still takes its place in "
                                                  "the budget (0 = offer every node)"),
    Param("warm_table", 1, 0, 1, int, "logits tree: 1 = start each prompt from the model's warm copy-logit "
                                      "table (read once from the datastore corpus); 0 = a cold table per "
                                      "prompt (the paper's setting)"),
]
RETRIEVAL_PARAMS = [
    Param("ngram_length", 10, 2, 32, int, "retrieval: longest n-gram the automaton keeps"),
    Param("capacity", 10_000, 64, 1_000_000, int, "retrieval: automaton node capacity (LRU evicts leaves)"),
    Param("min_match", 2, 1, 10, int, "retrieval: shortest matched suffix (border depth) that may draft"),
    Param("draft_ahead", 1, 0, 1, int, "retrieval: 1 = run the automaton on its own draft past the n-gram "
                                       "length (our addition); 0 = the paper's subtree-only paths"),
]


def check_retrieval(values: dict) -> None:
    if values["min_match"] > values["ngram_length"]:
        raise SpecvizError(f"min_match ({values['min_match']}) must not exceed ngram_length ({values['ngram_length']}).")


def copy_logit_drafter(lm, p: dict) -> CopyLogitDrafter:
    """The logits-tree drafter, warm (a copy of the model's seed table) or cold, as p['warm_table'] says."""
    from specviz.drafters.copy_logit_seed import shared_copy_logit_seed

    return CopyLogitDrafter(p["max_breadth"], shared_copy_logit_seed(lm) if p["warm_table"] else None,
                            p["min_path_prob"])


def automaton_drafter(p: dict) -> AutomatonDrafter:
    return AutomatonDrafter(p["ngram_length"], p["capacity"], p["min_match"], bool(p["draft_ahead"]))


class Racer(Method):
    name = "racer"
    summary = "RACER: Aho-Corasick retrieval tree first, copy-logit logits tree in the rest, merged by trie union"
    params = LOGITS_PARAMS + RETRIEVAL_PARAMS

    @classmethod
    def check(cls, values: dict) -> None:
        check_retrieval(values)

    def build(self, lm, p, draft):
        return [automaton_drafter(p), copy_logit_drafter(lm, p)]


class RacerLogits(Method):
    name = "racer-logits"
    summary = "RACER ablation: the copy-logit logits tree alone"
    params = LOGITS_PARAMS

    def build(self, lm, p, draft):
        return [copy_logit_drafter(lm, p)]


class RacerRetrieval(Method):
    name = "racer-retrieval"
    summary = "RACER ablation: the Aho-Corasick retrieval tree alone"
    params = RETRIEVAL_PARAMS

    @classmethod
    def check(cls, values: dict) -> None:
        check_retrieval(values)

    def build(self, lm, p, draft):
        return [automaton_drafter(p)]
