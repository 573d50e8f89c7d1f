"""A suffix array over a token stream (numpy): READER's long-term datastore index.

Documents are joined with a separator (-1) that no key contains. Suffixes are sorted by prefix
doubling (O(n log^2 n) with numpy sorts). The suffixes that start with a key form one range of the
array; appending a token to the key narrows the range by two binary searches on one column, and the
next-token counts after the key are the run lengths of that column inside the range (already sorted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEPARATOR = -1
SMALL_RANGE = 32  # a matched range of at most this many rows is counted in Python


@dataclass(frozen=True)
class RangeMatch:
    lo: int
    hi: int
    length: int   # key tokens matched: every suffix in sa[lo:hi] starts with them


def build_suffix_array(tokens: np.ndarray) -> np.ndarray:
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    _, rank = np.unique(tokens, return_inverse=True)
    rank = rank.astype(np.int64)
    step = 1
    while True:
        second = np.full(n, -1, dtype=np.int64)
        second[:n - step] = rank[step:] if step < n else second[:0]
        order = np.lexsort((second, rank))
        first_sorted, second_sorted = rank[order], second[order]
        new_group = np.empty(n, dtype=bool)
        new_group[0] = True
        new_group[1:] = (first_sorted[1:] != first_sorted[:-1]) | (second_sorted[1:] != second_sorted[:-1])
        new_rank = np.empty(n, dtype=np.int64)
        new_rank[order] = np.cumsum(new_group) - 1
        rank = new_rank
        if new_group.all() or step >= n:
            return order.astype(np.int64)
        step *= 2


class SuffixArray:
    def __init__(self, tokens: np.ndarray, sa: np.ndarray | None = None):
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        self.sa = np.ascontiguousarray(build_suffix_array(self.tokens) if sa is None else sa, dtype=np.int64)
        # the binary searches probe one row at a time: a memoryview reads a Python int straight from the
        # array, several times faster than indexing numpy for a scalar (same memory, no copy)
        self._sa_items, self._token_items = memoryview(self.sa), memoryview(self.tokens)
        # rows of the suffixes that start with token t: first_rows[t]:first_rows[t + 1] (the first narrow of
        # every lookup, a binary search over the whole array, becomes two reads)
        firsts = self.tokens[self.sa]
        top = int(firsts.max()) + 1 if len(firsts) else 0
        self._first_rows = memoryview(np.searchsorted(firsts, np.arange(top + 1)).astype(np.int64))

    def __len__(self) -> int:
        return len(self.tokens)

    def narrow(self, lo: int, hi: int, depth: int, token: int) -> tuple[int, int]:
        """Rows of sa[lo:hi] (all sharing `depth` leading tokens) whose next token is token (a suffix that
        ends before `depth` reads as SEPARATOR - 1, below every separator and token)."""
        sa, tokens, end = self._sa_items, self._token_items, len(self.tokens)
        a, b = lo, hi
        while a < b:  # first row whose token at depth is >= token
            mid = (a + b) // 2
            position = sa[mid] + depth
            if (tokens[position] if position < end else SEPARATOR - 1) < token:
                a = mid + 1
            else:
                b = mid
        start, b = a, hi
        while a < b:  # first row whose token at depth is > token
            mid = (a + b) // 2
            position = sa[mid] + depth
            if (tokens[position] if position < end else SEPARATOR - 1) <= token:
                a = mid + 1
            else:
                b = mid
        return start, a

    def find(self, key) -> RangeMatch | None:
        if not key:
            return RangeMatch(0, len(self.sa), 0)
        first = int(key[0])
        if not 0 <= first < len(self._first_rows) - 1:
            return None
        lo, hi = self._first_rows[first], self._first_rows[first + 1]
        for depth in range(1, len(key)):
            if lo >= hi:
                return None
            lo, hi = self.narrow(lo, hi, depth, int(key[depth]))
        return RangeMatch(lo, hi, len(key)) if lo < hi else None

    def has_follower(self, found: RangeMatch) -> bool:
        """Whether some suffix in the range continues with a token: the range is sorted by the token after
        the key, with separators and the stream's end below every token, so its last row tells."""
        position = self._sa_items[found.hi - 1] + found.length
        return position < len(self.tokens) and self._token_items[position] >= 0

    def match(self, tail: list[int], max_key: int, longest_first: bool = False,
              missing: int | None = None) -> RangeMatch | None:
        """The longest suffix of tail (at most max_key tokens) found with a follower (READER: drop the
        first token and retry). Wherever a suffix occurs with a follower, each shorter suffix does too,
        so the longest one is found by bisecting its length (about 3 lookups for 8, not up to 8).
        longest_first: try the whole length first (after a full-length match, it usually holds again);
        missing: a length known not to match (every longer one fails too)."""
        best, shortest_missing, longest_found = None, min(len(tail), max_key) + 1, 0
        if missing is not None:
            shortest_missing = min(shortest_missing, missing)
        if longest_first and shortest_missing > 1:
            found = self.find(tail[-(shortest_missing - 1):])
            if found is not None and self.has_follower(found):
                return found
            shortest_missing -= 1
        while shortest_missing - longest_found > 1:
            length = (longest_found + shortest_missing) // 2
            found = self.find(tail[-length:])
            if found is not None and self.has_follower(found):
                best, longest_found = found, length
            else:
                shortest_missing = length
        return best

    def extend(self, found: RangeMatch, token: int, tail: list[int], max_key: int) -> RangeMatch | None:
        if found.length < max_key:
            lo, hi = self.narrow(found.lo, found.hi, found.length, int(token))
            if lo < hi:
                grown = RangeMatch(lo, hi, found.length + 1)
                if self.has_follower(grown):
                    return grown
            # the key grown by token matched nothing with a follower: only shorter suffixes of tail can
            return self.match(tail, max_key, missing=found.length + 1)
        return self.match(tail, max_key, longest_first=True)

    def counts(self, found: RangeMatch) -> dict[int, int]:
        """Next-token counts after the matched key (separators and the stream's end excluded), by token."""
        if found.hi - found.lo <= SMALL_RANGE:  # most keys: a few rows, cheaper read one by one than by numpy
            sa, tokens, end, counted = self._sa_items, self._token_items, len(self.tokens), {}
            for row in range(found.lo, found.hi):
                position = sa[row] + found.length
                if position < end and tokens[position] >= 0:
                    counted[tokens[position]] = counted.get(tokens[position], 0) + 1
            return dict(sorted(counted.items()))
        positions = self.sa[found.lo:found.hi] + found.length
        positions = positions[positions < len(self.tokens)]
        following = self.tokens[positions]
        following = following[following >= 0]
        values, counts = np.unique(following, return_counts=True)
        return dict(zip(values.tolist(), counts.tolist()))

    def occurrences(self, key) -> int:
        found = self.find(key)
        return 0 if found is None else found.hi - found.lo
