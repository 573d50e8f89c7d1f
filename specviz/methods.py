"""Method presets: which drafters a method uses, how the budget is shared, and its hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from specviz.drafters.automaton_retrieval import AutomatonDrafter
from specviz.drafters.base import Drafter
from specviz.drafters.copy_logits import CopyLogitDrafter
from specviz.drafters.draft_model import DraftModelDrafter
from specviz.drafters.prompt_lookup import PromptLookupDrafter
from specviz.drafters.respec import ReSpecDrafter
from specviz.errors import SpecvizError
from specviz.params import Param, resolve
from specviz.relaxed import relaxed_accept
from specviz.tree import DraftTree
from specviz.verify import Verification

BUDGET_MAX = 256          # largest fixed tree (draft nodes) a user may ask for
AUTO_MAX_NODES = 64       # budget=auto chooses among at most this many nodes (RACER's capacity)


@dataclass
class Method:
    name: str
    summary: str
    params: list[Param] = field(default_factory=list)
    # (target, params, draft model) -> drafters; the draft model is the target itself unless one was given
    make_drafters: Callable[[object, dict, object], list[Drafter]] = lambda lm, p, draft: []
    check: Callable[[dict], None] = lambda p: None
    # greedy acceptance rule (tree, logits, params) -> Verification; None = strict greedy
    verify: Callable[[DraftTree, object, dict], Verification] | None = None
    uses_draft_model: bool = False

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
    def make(lm, p: dict, draft=None) -> list[Drafter]:
        drafters: list[Drafter] = []
        if "retrieval" in sources:  # retrieval takes the budget first, the logits tree the rest
            drafters.append(AutomatonDrafter(p["ngram_length"], p["capacity"], p["min_match"],
                                              bool(p["draft_ahead"])))
        if "logits" in sources:
            drafters.append(CopyLogitDrafter(p["max_breadth"]))
        return drafters
    return make


RESPEC_PARAMS = [
    Param("entropy_threshold", 1.5, 0.0, 10.0, float, "respec: retrieve only if the key's mean entropy "
                                                    "H_min (nats) is at most this"),
    Param("lambda_e", 0.5, 0.0, 5.0, float, "respec: key length preference in C_k = H_k + lambda_e / k"),
    Param("lookback", 3, 1, 8, int, "respec: l, the longest key (suffix) the trigger considers"),
    Param("alpha", 0.3, 0.01, 1.0, float, "respec: EMA rate of the match-position scores"),
    Param("theta_score", 0.2, 0.0, 1.0, float, "respec: match positions scoring below this are skipped"),
    Param("branch_len", 16, 1, 64, int, "respec: tokens copied after each selected match position"),
    Param("tau", 0.0, 0.0, 10.0, float, "respec: relaxed verification margin log p(top1) - log p(x) "
                                         "for retrieved tokens (0 = lossless)"),
    Param("m", 2, 0, 8, int, "respec: greedy matches a relaxed token needs after it (look-ahead)"),
    Param("phi", 2, 0, 8, int, "respec: Phi, relaxed attempts per step"),
    Param("top_k", 5, 1, 100, int, "respec: a relaxed token must be in the target's top-k"),
    Param("fallback", "auto", 0, 0, str, "respec: drafter when retrieval does not fire: the draft model, the "
                                          "copy-logit tree, or auto (more tokens per measured ms)",
          choices=("auto", "model", "logits")),
    Param("draft_breadth", 2, 1, 8, int, "model drafter: top-k children per node on the branching levels"),
    Param("branch_levels", 1, 0, 4, int, "model drafter: levels that branch; deeper levels are greedy"),
    Param("draft_depth", 4, 1, 16, int, "model drafter: levels drafted (one draft forward each)"),
]


def _respec_drafters(lm, p: dict, draft=None) -> list[Drafter]:
    model = None
    if p["fallback"] != "logits":
        model = DraftModelDrafter(draft or lm, lm.vocab_size, p["draft_breadth"], p["branch_levels"],
                                  p["draft_depth"])
    # the auto fallback's measurements are shared by sessions with the same models, device and drafters
    setting = (f"{lm.name}|{draft.name if draft else 'self'}|{lm.device}|{p['draft_breadth']}|"
               f"{p['branch_levels']}|{p['draft_depth']}|{p['max_breadth']}")
    return [ReSpecDrafter(p, model, setting)]


def _respec_verify(tree: DraftTree, logits, p: dict) -> Verification:
    return relaxed_accept(tree, logits, p["top_k"], p["tau"], p["m"], p["phi"])


METHODS: dict[str, Method] = {
    "ar": Method("ar", "plain greedy / sampled decoding: one target forward per token (the baseline)"),
    "pld": Method("pld", "prompt lookup: the trailing n-gram's last earlier occurrence drafts one chain",
                  PLD_PARAMS,
                  lambda lm, p, draft: [PromptLookupDrafter(p["max_ngram"], p["min_ngram"], p["num_pred_tokens"])],
                  _check_pld),
    "racer": Method("racer", "RACER: Aho-Corasick retrieval tree first, copy-logit logits tree in the rest, "
                             "merged by trie union", LOGITS_PARAMS + RETRIEVAL_PARAMS,
                    _racer_drafters(("retrieval", "logits")), _check_racer),
    "racer-logits": Method("racer-logits", "RACER ablation: the copy-logit logits tree alone", LOGITS_PARAMS,
                           _racer_drafters(("logits",))),
    "racer-retrieval": Method("racer-retrieval", "RACER ablation: the Aho-Corasick retrieval tree alone",
                              RETRIEVAL_PARAMS, _racer_drafters(("retrieval",)), _check_racer),
    "respec": Method("respec", "ReSpec: entropy-triggered retrieval from feedback-scored match positions "
                               "(relaxed verification), else a draft model or the copy-logit tree (strict)",
                     RESPEC_PARAMS + LOGITS_PARAMS, _respec_drafters, verify=_respec_verify,
                     uses_draft_model=True),
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
