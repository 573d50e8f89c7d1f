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

import numpy as np
import torch

from specviz.drafters.base import Drafter, StepOutcome
from specviz.core.tree import ROOT, DraftTree


PROB_BANDS = (0.8, 0.5, 0.2, 0.05, 0.0)  # copy-logit probability bands the acceptance model tells apart


def prob_bucket(prob: float) -> str:
    """'p80', 'p50', 'p20', 'p05' or 'p00': the highest band edge not above the probability."""
    return f"p{round(100 * next(edge for edge in PROB_BANDS if prob >= edge)):02d}"


def child_breadth(parent_breadth: int, sibling_rank: int, parent_is_root: bool) -> int:
    """RACER's decreasing breadth: b_child(i, j) = max(1, floor(b_i / 2^(j + [i != 0])))."""
    return max(1, parent_breadth >> (sibling_rank + (0 if parent_is_root else 1)))


class CopyLogitTable:
    def __init__(self, width: int):
        self.width = width
        self.top_tokens: np.ndarray | None = None   # (vocab, width) token ids, best first
        self.top_probs: np.ndarray | None = None    # (vocab, width) their probabilities
        self.seen: np.ndarray | None = None         # (vocab,) whether the row holds anything yet

    def store(self, tokens: list[int], logits: torch.Tensor, log_norms: torch.Tensor | None = None,
              top=None, logit_rows: torch.Tensor | None = None) -> None:
        """logits[logit_rows[i]] (default: logits[i]) is the target's prediction after tokens[i]; a token
        listed twice keeps its last row. log_norms and top ((values, ids) of each row's top-k, k >= width)
        are per logits row, where the caller has them already."""
        if self.top_tokens is None:
            vocab = logits.shape[-1]
            self.top_tokens = np.zeros((vocab, self.width), dtype=np.int64)
            self.top_probs = np.zeros((vocab, self.width), dtype=np.float32)
            self.seen = np.zeros(vocab, dtype=bool)
        ids = np.asarray(tokens, dtype=np.int64)
        _, last_from_end = np.unique(ids[::-1], return_index=True)
        rows = len(ids) - 1 - last_from_end
        picked = torch.from_numpy(rows).to(logits.device)
        if logit_rows is not None:
            picked = logit_rows.index_select(0, picked)
        if top is not None and top[0].shape[-1] >= self.width:
            values = top[0].index_select(0, picked)[:, :self.width]
            indices = top[1].index_select(0, picked)[:, :self.width]
        else:
            values, indices = logits.index_select(0, picked).topk(min(self.width, logits.shape[-1]), dim=-1)
        norms = (log_norms.index_select(0, picked) if log_norms is not None
                 else torch.logsumexp(logits.index_select(0, picked), dim=-1))
        self.top_tokens[ids[rows]] = indices.cpu().numpy()
        self.top_probs[ids[rows]] = (values - norms[:, None]).exp().cpu().numpy()
        self.seen[ids[rows]] = True

    def copy(self) -> "CopyLogitTable":
        twin = CopyLogitTable(self.width)
        if self.top_tokens is not None:
            twin.top_tokens, twin.top_probs, twin.seen = self.top_tokens.copy(), self.top_probs.copy(), self.seen.copy()
        return twin

    def saved_rows(self, tokens: list[int]):
        """A copy of the rows store(tokens, ...) would overwrite (None while the table is empty)."""
        if self.top_tokens is None:
            return None
        ids = np.unique(np.asarray(tokens, dtype=np.int64))
        return ids, self.top_tokens[ids].copy(), self.top_probs[ids].copy(), self.seen[ids].copy()

    def restore_rows(self, saved) -> None:
        if saved is None:
            self.top_tokens = self.top_probs = self.seen = None
            return
        ids, tokens, probs, seen = saved
        self.top_tokens[ids], self.top_probs[ids], self.seen[ids] = tokens, probs, seen

    def row(self, token: int) -> tuple[np.ndarray, np.ndarray] | None:
        if self.seen is None or token >= len(self.seen) or not self.seen[token]:
            return None  # cold row: draft nothing after this token
        return self.top_tokens[token], self.top_probs[token]


class CopyLogitDrafter(Drafter):
    source = "logits"

    def __init__(self, max_breadth: int = 8, seed: CopyLogitTable | None = None):
        """seed: a warm table to start from (a copy is taken; its rows may be wider than max_breadth)."""
        self.max_breadth = max_breadth
        self.table = seed.copy() if seed is not None and seed.width >= max_breadth else CopyLogitTable(max_breadth)
        self._undo = None  # rows this step's observe overwrote

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor) -> None:
        self.table.store(context[start:start + logits.shape[0]], logits)

    def observe(self, outcome: StepOutcome) -> None:
        tree, path = outcome.tree, outcome.verification.path
        committed = [ROOT] + path
        others = sorted(set(range(len(tree))) - set(committed))
        order = others + committed  # the committed occurrences are the most recent: they go last
        picked = torch.tensor(order, device=outcome.logits.device)
        norms, top = outcome.verification.log_norms, outcome.verification.top
        tokens = [tree.tokens[n] for n in order]
        self._undo = (self.table.saved_rows(tokens),)
        self.table.store(tokens, outcome.logits, norms, (top.values, top.ids), picked)

    def checkpoint(self):
        self._undo = None
        return True

    def rollback(self, saved) -> None:
        if self._undo is not None:
            self.table.restore_rows(self._undo[0])
            self._undo = None

    def propose(self, context: list[int], budget: int) -> DraftTree:
        """Breadth-first from the root: node i gets b_i children from its token's row, child j of it
        gets breadth b_child(i, j); stops when the budget is spent."""
        tree = DraftTree(context[-1])
        frontier = deque([(ROOT, self.max_breadth)])
        left = budget
        while frontier and left > 0:
            node, breadth = frontier.popleft()
            row = self.table.row(tree.tokens[node])
            if row is None:
                continue
            tokens, probs = row
            for rank in range(min(breadth, len(tokens))):
                if left == 0:
                    break
                prob = float(probs[rank])
                child = tree.add(node, int(tokens[rank]), self.source, score=prob, rank=rank,
                                 bucket=prob_bucket(prob), prior=prob)
                left -= 1
                frontier.append((child, child_breadth(breadth, rank, node == ROOT)))
        return tree
