"""Method presets: which drafters a method uses, how the budget is shared, and its hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from specviz.drafters.automaton_retrieval import AutomatonDrafter
from specviz.drafters.base import Drafter
from specviz.drafters.copy_logits import CopyLogitDrafter
from specviz.drafters.prompt_lookup import PromptLookupDrafter
from specviz.errors import SpecvizError
from specviz.params import Param, resolve
from specviz.tree import DraftTree

BUDGET_MAX = 256          # largest fixed tree (draft nodes) a user may ask for
AUTO_MAX_NODES = 64       # budget=auto chooses among at most this many nodes (RACER's capacity)


@dataclass
class Method:
    name: str
    summary: str
    params: list[Param] = field(default_factory=list)
    make_drafters: Callable[[object, dict], list[Drafter]] = lambda lm, p: []
    check: Callable[[dict], None] = lambda p: None

    def resolve_params(self, overrides: dict | None) -> dict:
        values = resolve(self.params, overrides, self.name)
        self.check(values)
        return values

    def draft(self, drafters: list[Drafter], context: list[int], budget: int) -> tuple[DraftTree, dict]:
        """Drafters in order take what budget the earlier ones left; their trees merge by trie union
        (a node proposed twice costs once). Also returns the split: nodes each source was offered and
        proposed, and how many of a source's nodes were already in the tree (shared)."""
        tree = DraftTree(context[-1])
        split = {}
        for drafter in drafters:
            left = budget - tree.num_drafted
            if left <= 0:
                split[drafter.source] = {"offered": 0, "proposed": 0, "shared": 0}
                continue
            proposal = drafter.propose(context, left)
            before = tree.num_drafted
            tree = tree.union(proposal)
            split[drafter.source] = {"offered": left, "proposed": proposal.num_drafted,
                                     "shared": proposal.num_drafted - (tree.num_drafted - before)}
        return tree, split


def _check_pld(values: dict) -> None:
    if values["min_ngram"] > values["max_ngram"]:
        raise SpecvizError(f"min_ngram ({values['min_ngram']}) must not exceed max_ngram ({values['max_ngram']}).")


PLD_PARAMS = [
    Param("max_ngram", 3, 1, 10, int, "longest suffix n-gram looked up in prompt + output"),
    Param("min_ngram", 1, 1, 10, int, "shortest n-gram tried before giving up"),
    Param("num_pred_tokens", 10, 1, 64, int, "tokens drafted after a match"),
]

def _check_racer(values: dict) -> None:
    if values["min_match"] > values["ngram_length"]:
        raise SpecvizError(f"min_match ({values['min_match']}) must not exceed ngram_length ({values['ngram_length']}).")


LOGITS_PARAMS = [
    Param("max_breadth", 8, 1, 16, int, "logits tree: children of the root (b_0); deeper nodes get b_i / 2^(j+1)"),
]
RETRIEVAL_PARAMS = [
    Param("ngram_length", 10, 2, 32, int, "retrieval: longest n-gram the automaton keeps"),
    Param("capacity", 10_000, 64, 1_000_000, int, "retrieval: automaton node capacity (LRU evicts leaves)"),
    Param("min_match", 2, 1, 10, int, "retrieval: shortest matched suffix (border depth) that may draft"),
    Param("draft_ahead", 1, 0, 1, int, "retrieval: 1 = run the automaton on its own draft past the n-gram "
                                       "length (our addition); 0 = the paper's subtree-only paths"),
]


def _racer_drafters(sources: tuple[str, ...]):
    def make(lm, p: dict) -> list[Drafter]:
        drafters: list[Drafter] = []
        if "retrieval" in sources:  # retrieval takes the budget first, the logits tree the rest
            drafters.append(AutomatonDrafter(p["ngram_length"], p["capacity"], p["min_match"],
                                              bool(p["draft_ahead"])))
        if "logits" in sources:
            drafters.append(CopyLogitDrafter(p["max_breadth"]))
        return drafters
    return make


METHODS: dict[str, Method] = {
    "ar": Method("ar", "plain greedy / sampled decoding: one target forward per token (the baseline)"),
    "pld": Method("pld", "prompt lookup: the trailing n-gram's last earlier occurrence drafts one chain",
                  PLD_PARAMS,
                  lambda lm, p: [PromptLookupDrafter(p["max_ngram"], p["min_ngram"], p["num_pred_tokens"])],
                  _check_pld),
    "racer": Method("racer", "RACER: Aho-Corasick retrieval tree first, copy-logit logits tree in the rest, "
                             "merged by trie union", LOGITS_PARAMS + RETRIEVAL_PARAMS,
                    _racer_drafters(("retrieval", "logits")), _check_racer),
    "racer-logits": Method("racer-logits", "RACER ablation: the copy-logit logits tree alone", LOGITS_PARAMS,
                           _racer_drafters(("logits",))),
    "racer-retrieval": Method("racer-retrieval", "RACER ablation: the Aho-Corasick retrieval tree alone",
                              RETRIEVAL_PARAMS, _racer_drafters(("retrieval",)), _check_racer),
}

PEER_METHODS = {
    "hf-pld": "transformers generate(prompt_lookup_num_tokens=10)",
    "hf-assisted": "transformers generate(assistant_model=draft model)",
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise SpecvizError(f"Unknown method '{name}'; choose one of {', '.join(METHODS)}.")
    return METHODS[name]


def parse_budget(budget) -> int | str:
    """'auto' or a whole number of draft nodes in 1..BUDGET_MAX."""
    if isinstance(budget, str) and budget.strip().lower() == "auto":
        return "auto"
    return Param("budget", 16, 1, BUDGET_MAX, int).coerce(budget)
