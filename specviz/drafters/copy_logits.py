"""RACER's Logits Tree (`logits` source) from copy-logit.

For every token id the table keeps the top-k of the target's next-token distribution at that token's
most recent occurrence (prefill chunks, then every node of every verified tree, the committed ones last
so they win). The next position after a token is drafted from its row: "the same token in a similar
context is followed similarly".

Cold rows: a token that has not occurred yet has no row. Such a node gets no logits children (it stays a
leaf of the logits tree); nothing is drafted from an empty row, so token 0 or any other filler never
reaches the verifier.
"""

from __future__ import annotations

from collections import deque

import torch

from specviz.drafters.base import Drafter, StepOutcome
from specviz.drafters.copy_logit_table import CopyLogitTable
from specviz.params import Param
from specviz.tree.draft_tree import ROOT, DraftTree


PROB_BANDS = (0.8, 0.5, 0.2, 0.05, 0.0)  # copy-logit probability bands the acceptance model tells apart

# the logits tree's parameters, as every method that drafts with it shows them
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


_BAND_NAMES = tuple(f"p{round(100 * edge):02d}" for edge in PROB_BANDS)


def prob_bucket(prob: float) -> str:
    """'p80', 'p50', 'p20', 'p05' or 'p00': the highest band edge not above the probability."""
    for edge, name in zip(PROB_BANDS, _BAND_NAMES):
        if prob >= edge:
            return name
    return _BAND_NAMES[-1]


def child_breadth(parent_breadth: int, sibling_rank: int, parent_is_root: bool) -> int:
    """RACER's decreasing breadth: b_child(i, j) = max(1, floor(b_i / 2^(j + [i != 0])))."""
    return max(1, parent_breadth >> (sibling_rank + (0 if parent_is_root else 1)))


class CopyLogitDrafter(Drafter):
    source = "logits"

    def __init__(self, max_breadth: int = 8, seed: CopyLogitTable | None = None, min_path_prob: float = 0.0):
        """seed: a warm table to start from (a copy is taken; its rows may be wider than max_breadth);
        min_path_prob: the least path probability of a node the tree offers (0: every node)."""
        self.max_breadth, self.min_path_prob = max_breadth, min_path_prob
        self.table = seed.copy() if seed is not None and seed.width >= max_breadth else CopyLogitTable(max_breadth)
        self._undo = None  # rows this step's observe overwrote

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor, features=None) -> None:
        self.table.store(context[start:start + logits.shape[0]], logits)

    def observe(self, outcome: StepOutcome) -> None:
        tree, path = outcome.tree, outcome.verification.path
        committed = [ROOT] + path
        others = sorted(set(range(len(tree))) - set(committed))
        order = others + committed  # the committed occurrences are the most recent: they go last
        norms, top = outcome.verification.log_norms, outcome.verification.top
        tokens = [tree.tokens[n] for n in order]
        self._undo = (self.table.saved_rows(tokens),)
        self.table.store(tokens, outcome.logits, norms, (top.values_np, top.ids_np), order)

    def checkpoint(self):
        self._undo = None
        return True

    def rollback(self, saved) -> None:
        if self._undo is not None:
            self.table.restore_rows(self._undo[0])
            self._undo = None

    def propose(self, context: list[int], budget: int) -> DraftTree:
        return self.grow(DraftTree(context[-1]), budget)[0]

    def extend(self, context: list[int], tree: DraftTree, budget: int) -> tuple[DraftTree, int]:
        """Grown in place: the same nodes as merging propose()'s tree, without building it first."""
        return self.grow(tree, budget)

    def grow(self, tree: DraftTree, budget: int) -> tuple[DraftTree, int]:
        """Breadth-first from the root: node i gets b_i children from its token's row, child j of it
        gets breadth b_child(i, j); stops when budget children were proposed (a child the tree already
        held counts too, as it would in a tree of its own). Returns the tree and how many nodes it proposed.

        min_path_prob > 0 (our addition): a node whose path probability, the product of the copy-logit
        probabilities from the root down to it, is below it is left out, and so is everything below it; it
        still takes its place in the budget, so the tree holds exactly the nodes of the full schedule at or
        above that probability (plus any the tree held already). The planner rarely keeps the others: on
        the suite and the held-out prompts it kept 9 of the 23,136 below 0.01 it was offered (1,047 of all
        36,528 copy-logit nodes), and each offered node costs drafting, its chance and its place in the plan."""
        # (node, token, breadth, path probability); node -1: left out, walked only for its budget
        frontier = deque([(ROOT, tree.tokens[ROOT], self.max_breadth, 1.0)])
        offered_ahead = 1  # entries in the frontier that are in the tree: once none is, nothing more can be
        left, proposed = budget, 0
        while offered_ahead and left > 0:
            node, token, breadth, reach = frontier.popleft()
            offered_ahead -= node >= 0
            row = self.table.row(token)
            if row is None:
                continue
            tokens, probs = row
            for rank in range(min(breadth, len(tokens))):
                if left == 0:
                    break
                left -= 1
                prob, child_token = float(probs[rank]), int(tokens[rank])
                child = -1
                if node >= 0 and (reach * prob >= self.min_path_prob
                                  or tree.child_with_token(node, child_token) is not None):
                    child = tree.add(node, child_token, self.source, score=prob, rank=rank,
                                     bucket=prob_bucket(prob), prior=prob)
                    proposed += 1
                    offered_ahead += 1
                frontier.append((child, child_token, child_breadth(breadth, rank, node == ROOT), reach * prob))
        return tree, proposed


def copy_logit_drafter(lm, p: dict) -> CopyLogitDrafter:
    """The logits-tree drafter for LOGITS_PARAMS values p, warm (a copy of the model's seed table) or cold,
    as p['warm_table'] says."""
    from specviz.drafters.copy_logit_seed import shared_copy_logit_seed

    return CopyLogitDrafter(p["max_breadth"], shared_copy_logit_seed(lm) if p["warm_table"] else None,
                            p["min_path_prob"])
