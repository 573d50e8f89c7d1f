"""Prompt lookup (PLD): match the trailing n-gram earlier in prompt + output and draft what followed it."""

from __future__ import annotations

import numpy as np

from specviz.drafters.base import Drafter
from specviz.tree.draft_tree import DraftTree


def lookup_continuation(context: list[int], max_ngram: int, min_ngram: int, length: int) -> tuple[list[int], int]:
    """Tokens that followed the most recent earlier occurrence of the longest matching suffix n-gram,
    and that n-gram's length (0 when nothing matched)."""
    tokens = np.asarray(context, dtype=np.int64)
    n_tokens = len(tokens)
    for n in range(min(max_ngram, n_tokens - 1), min_ngram - 1, -1):
        suffix = tokens[n_tokens - n:]
        # windows starting at 0 .. n_tokens - n - 1 (the suffix itself excluded)
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:n_tokens - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start:start + length].tolist(), n
    return [], 0


class PromptLookupDrafter(Drafter):
    source = "retrieval"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_pred_tokens: int = 10):
        self.max_ngram, self.min_ngram, self.num_pred_tokens = max_ngram, min_ngram, num_pred_tokens

    def propose(self, context: list[int], budget: int) -> DraftTree:
        tree = DraftTree(context[-1])
        chain, matched = lookup_continuation(context, self.max_ngram, self.min_ngram, min(budget, self.num_pred_tokens))
        # the matched length is the bucket: budget=auto learns 1-gram and 3-gram matches apart
        tree.add_path(chain, self.source, bucket=f"n{matched}")
        return tree
