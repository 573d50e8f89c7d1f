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
from dataclasses import dataclass

import numpy as np
import torch

from specviz.accept.verification import top_logits
from specviz.drafters.base import Drafter, StepOutcome
from specviz.tree.draft_tree import ROOT, DraftTree


PROB_BANDS = (0.8, 0.5, 0.2, 0.05, 0.0)  # copy-logit probability bands the acceptance model tells apart


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


@dataclass(frozen=True)
class FrozenRows:
    """Dense read-only rows shared by many tables (the warm seed): (vocab, width) tokens and probabilities."""
    top_tokens: np.ndarray
    top_probs: np.ndarray
    seen: np.ndarray        # (vocab,) whether the row holds anything


class CopyLogitTable:
    """Per token: the target's top-`width` next tokens and their probabilities where it last occurred.
    The rows a table writes are its own (a dict: a table costs the rows it writes, not vocab x width);
    a row it has not written comes from `base`, shared read-only rows (the warm seed), so the copy each
    session starts from is free."""

    def __init__(self, width: int, base: FrozenRows | None = None):
        self.width = width
        self.base = base
        self.rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.vocab: int | None = base.seen.shape[0] if base is not None else None

    def store(self, tokens: list[int], logits: torch.Tensor, log_norms: np.ndarray | None = None,
              top: tuple[np.ndarray, np.ndarray] | None = None, logit_rows: list[int] | None = None) -> None:
        """logits[logit_rows[i]] (default: logits[i]) is the target's prediction after tokens[i]; a token
        listed twice keeps its last row. log_norms and top ((values, ids) of each row's top-k, k >= width)
        are per logits row, as numpy arrays, where the caller has them already."""
        self.vocab = logits.shape[-1]
        last = {int(token): i for i, token in enumerate(tokens)}  # a token listed twice keeps its last row
        picked = list(last.values()) if logit_rows is None else [logit_rows[i] for i in last.values()]
        if top is not None and log_norms is not None and top[0].shape[-1] >= self.width:
            # a verified step's rows: a few small arrays (numpy indexing costs a tenth of torch's per call)
            top_tokens = top[1][picked, :self.width]
            top_probs = np.exp(top[0][picked, :self.width] - log_norms[picked, None])
        else:
            picked_logits = logits.index_select(0, torch.tensor(picked, dtype=torch.long, device=logits.device))
            values, indices, norms = top_logits(picked_logits, min(self.width, logits.shape[-1]))
            top_tokens = indices.cpu().numpy()
            top_probs = (values - norms[:, None]).exp().cpu().numpy()
        for i, token in enumerate(last):
            self.rows[token] = (top_tokens[i], top_probs[i])

    def copy(self) -> "CopyLogitTable":
        """A table that starts from this one's rows and writes its own (this one is never changed by it)."""
        twin = CopyLogitTable(self.width, self.frozen())
        return twin

    def frozen(self) -> FrozenRows | None:
        """All rows as dense shared arrays (computed once for a table that wrote rows over no base)."""
        if not self.rows:
            return self.base
        vocab = self.vocab
        top_tokens = np.zeros((vocab, self.width), dtype=np.int32)
        top_probs = np.zeros((vocab, self.width), dtype=np.float32)
        seen = np.zeros(vocab, dtype=bool)
        if self.base is not None:
            top_tokens[:], top_probs[:], seen[:] = self.base.top_tokens, self.base.top_probs, self.base.seen
        for token, (tokens, probs) in self.rows.items():
            top_tokens[token], top_probs[token], seen[token] = tokens, probs, True
        self.base, self.rows = FrozenRows(top_tokens, top_probs, seen), {}
        return self.base

    @property
    def filled(self) -> int:
        """How many tokens have a row (own or shared)."""
        shared = int(self.base.seen.sum()) if self.base is not None else 0
        own_new = sum(1 for t in self.rows if self.base is None or t >= len(self.base.seen) or not self.base.seen[t])
        return shared + own_new

    def saved_rows(self, tokens: list[int]) -> dict:
        """The own rows store(tokens, ...) would overwrite (None: the table had none of its own there)."""
        return {t: self.rows.get(t) for t in set(tokens)}

    def restore_rows(self, saved: dict) -> None:
        for token, row in saved.items():
            if row is None:
                self.rows.pop(token, None)
            else:
                self.rows[token] = row

    def row(self, token: int) -> tuple[np.ndarray, np.ndarray] | None:
        own = self.rows.get(token)
        if own is not None:
            return own
        base = self.base
        if base is None or token >= len(base.seen) or not base.seen[token]:
            return None  # cold row: draft nothing after this token
        return base.top_tokens[token], base.top_probs[token]


class CopyLogitDrafter(Drafter):
    source = "logits"

    def __init__(self, max_breadth: int = 8, seed: CopyLogitTable | None = None, min_path_prob: float = 0.0):
        """seed: a warm table to start from (a copy is taken; its rows may be wider than max_breadth);
        min_path_prob: the least path probability of a node the tree offers (0: every node)."""
        self.max_breadth, self.min_path_prob = max_breadth, min_path_prob
        self.table = seed.copy() if seed is not None and seed.width >= max_breadth else CopyLogitTable(max_breadth)
        self._undo = None  # rows this step's observe overwrote

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor) -> None:
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
