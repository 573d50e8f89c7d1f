"""RACER's Retrieval Tree (`retrieval` source): the most frequent continuations of the borders the
Aho-Corasick automaton finds for the current suffix, merged into one trie."""

from __future__ import annotations

from specviz.errors import SpecvizError
from specviz.index.automaton import NgramAutomaton
from specviz.drafters.base import Drafter
from specviz.params import Param
from specviz.tree.draft_tree import ROOT, DraftTree

MATCH_BUCKETS = (1, 2, 3, 5, 8)  # matched-suffix lengths the acceptance model tells apart

# the retrieval tree's parameters, as every method that drafts with it shows them
RETRIEVAL_PARAMS = [
    Param("ngram_length", 10, 2, 32, int, "retrieval: longest n-gram the automaton keeps"),
    Param("capacity", 10_000, 64, 1_000_000, int, "retrieval: automaton node capacity (LRU evicts leaves)"),
    Param("min_match", 2, 1, 10, int, "retrieval: shortest matched suffix (border depth) that may draft"),
    Param("draft_ahead", 1, 0, 1, int, "retrieval: 1 = run the automaton on its own draft past the n-gram "
                                       "length (our addition); 0 = the paper's subtree-only paths"),
]


def check_retrieval(values: dict) -> None:
    """RETRIEVAL_PARAMS' cross-parameter check (a method's check calls it)."""
    if values["min_match"] > values["ngram_length"]:
        raise SpecvizError(f"min_match ({values['min_match']}) must not exceed ngram_length ({values['ngram_length']}).")


def match_bucket(border_depth: int, share: float, ahead: bool) -> str:
    """'m3h': the largest bucket edge not above the matched length, then 'h' when the continuation
    followed at least half of the earlier occurrences ('l' otherwise); 'a' marks draft-ahead tokens."""
    edge = max(e for e in MATCH_BUCKETS if e <= border_depth)
    return f"m{edge}{'h' if share >= 0.5 else 'l'}{'a' if ahead else ''}"


class AutomatonDrafter(Drafter):
    source = "retrieval"

    def __init__(self, max_ngram: int = 10, capacity: int = 10_000, min_border: int = 2, draft_ahead: bool = True):
        self.automaton = NgramAutomaton(max_ngram, capacity)
        self.min_border, self.draft_ahead = min_border, draft_ahead
        self.linked = False

    def _sync(self, context: list[int]) -> None:
        """Feed the tokens committed since the last call (lazily, at propose: a failed step leaves the
        automaton as it was); link the whole trie once, after the prompt."""
        fed = self.automaton.tokens_fed
        if fed < len(context):
            self.automaton.feed(context[fed:])
        if not self.linked:
            self.automaton.build_failure_links()
            self.linked = True

    def propose(self, context: list[int], budget: int) -> DraftTree:
        self._sync(context)
        tree = DraftTree(context[-1])
        for found in self.automaton.continuations(budget, self.min_border, self.draft_ahead):
            parent = ROOT
            for i, (token, freq, share) in enumerate(zip(found.tokens, found.freqs, found.shares)):
                parent = tree.add(parent, token, self.source, score=share, freq=freq, match=found.border_depth,
                                  bucket=match_bucket(found.border_depth, share, i >= found.ahead_from), prior=share)
        return tree


def automaton_drafter(p: dict) -> AutomatonDrafter:
    """The retrieval-tree drafter for RETRIEVAL_PARAMS values p."""
    return AutomatonDrafter(p["ngram_length"], p["capacity"], p["min_match"], bool(p["draft_ahead"]))
