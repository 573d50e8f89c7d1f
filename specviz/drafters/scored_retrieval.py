"""ReSpec's feedback-driven candidate selection (`retrieval` source).

Every earlier occurrence of the trigger's key is a candidate position: what followed it is a draft. Each
position keeps an EMA score S <- (1 - alpha) S + alpha R, R = accepted / drafted, starting at 0.5; the
ones with S >= theta_score are ranked (ties: the most recent first) and the best `branches` (3) become
branches of one retrieval tree. After verification the winner (the branch with the longest accepted
prefix) gets its own rate and the other selected positions R = 0. A position whose branch the budget
cut away entirely was not tried and keeps its score.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from specviz.index.match_positions import MatchPositions
from specviz.records.notes import RetrievalCandidate, RetrievalReport
from specviz.tree.draft_tree import ROOT, DraftTree

INITIAL_SCORE = 0.5


@dataclass
class Candidate:
    position: int            # index in prompt + output where the copied continuation starts
    score: float             # EMA score before this step's update
    tokens: list[int]        # the continuation drafted from it
    drafted: int = 0         # of those, nodes the verified tree held
    accepted: int = 0        # of those, tokens the target accepted
    rate: float | None = None  # R used in the update (None: not tried)


def score_bucket(score: float) -> str:
    return "s" + ("hi" if score >= 0.7 else "mid" if score >= 0.4 else "lo")


class ScoredRetriever:
    source = "retrieval"

    def __init__(self, alpha: float = 0.3, theta_score: float = 0.2, branches: int = 3, branch_len: int = 16):
        self.alpha, self.theta_score, self.branches, self.branch_len = alpha, theta_score, branches, branch_len
        self.scores: dict[int, float] = {}
        self.selected: list[Candidate] = []
        self.matched = 0     # positions the key had this step
        self.passed = 0      # of those, positions with S >= theta_score

    def score(self, position: int) -> float:
        return self.scores.get(position, INITIAL_SCORE)

    def select(self, index: MatchPositions, key: list[int]) -> list[Candidate]:
        positions = index.positions(key)
        passing = [p for p in positions if self.score(p) >= self.theta_score]
        self.matched, self.passed = len(positions), len(passing)
        best = heapq.nlargest(self.branches, passing, key=lambda p: (self.score(p), p))
        self.selected = [Candidate(p, self.score(p), index.continuation(p, self.branch_len)) for p in best]
        self.selected = [c for c in self.selected if c.tokens]
        return self.selected

    def tree(self, root_token: int, budget: int) -> DraftTree:
        """The selected continuations, best first, merged into one trie within the budget."""
        tree = DraftTree(root_token)
        for rank, cand in enumerate(self.selected):
            parent = ROOT
            for depth, token in enumerate(cand.tokens):
                if tree.child_with_token(parent, token) is None and tree.num_drafted >= budget:
                    break
                parent = tree.add(parent, token, self.source, score=cand.score, position=cand.position,
                                  branch=rank, bucket=score_bucket(cand.score), prior=cand.score)
        return tree

    def feedback(self, verified: DraftTree, accepted_drafts: list[int]) -> None:
        """EMA update of the selected positions from the verified tree and the accepted draft tokens."""
        for cand in self.selected:
            node = ROOT
            for token in cand.tokens:
                node = verified.child_with_token(node, token)
                if node is None:
                    break
                cand.drafted += 1
            cand.accepted = 0
            for mine, got in zip(cand.tokens[:cand.drafted], accepted_drafts):
                if mine != got:
                    break
                cand.accepted += 1
        tried = [c for c in self.selected if c.drafted]
        if not tried:
            return
        winner = max(tried, key=lambda c: c.accepted)  # max keeps the first (best-ranked) on ties
        for cand in tried:
            cand.rate = cand.accepted / cand.drafted if cand is winner else 0.0
            self.scores[cand.position] = (1 - self.alpha) * cand.score + self.alpha * cand.rate

    def report(self) -> RetrievalReport:
        return RetrievalReport(matched=self.matched, passed=self.passed, candidates=[
            RetrievalCandidate(position=c.position, score=c.score, drafted=c.drafted, accepted=c.accepted,
                               rate=c.rate, length=len(c.tokens)) for c in self.selected])
