"""Method presets: which drafters a method uses, how the budget is shared, and its hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from specviz.drafters.base import Drafter
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

    def draft(self, drafters: list[Drafter], context: list[int], budget: int) -> DraftTree:
        """Drafters in order take what budget the earlier ones left; their trees merge by trie union
        (a node proposed twice costs once)."""
        tree = DraftTree(context[-1])
        for drafter in drafters:
            left = budget - tree.num_drafted
            if left <= 0:
                break
            tree = tree.union(drafter.propose(context, left))
        return tree


def _check_pld(values: dict) -> None:
    if values["min_ngram"] > values["max_ngram"]:
        raise SpecvizError(f"min_ngram ({values['min_ngram']}) must not exceed max_ngram ({values['max_ngram']}).")


PLD_PARAMS = [
    Param("max_ngram", 3, 1, 10, int, "longest suffix n-gram looked up in prompt + output"),
    Param("min_ngram", 1, 1, 10, int, "shortest n-gram tried before giving up"),
    Param("num_pred_tokens", 10, 1, 64, int, "tokens drafted after a match"),
]

METHODS: dict[str, Method] = {
    "ar": Method("ar", "plain greedy / sampled decoding: one target forward per token (the baseline)"),
    "pld": Method("pld", "prompt lookup: the trailing n-gram's last earlier occurrence drafts one chain",
                  PLD_PARAMS,
                  lambda lm, p: [PromptLookupDrafter(p["max_ngram"], p["min_ngram"], p["num_pred_tokens"])],
                  _check_pld),
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
