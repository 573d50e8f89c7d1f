"""READER's self-repetition metric (section 4.1): how long the copies are that an infinite search tree
over the already-seen tokens could draft.

A pointer walks the response; at each position it takes the longest run of tokens starting there that
also occurs in the input (prompt), in the response before the pointer, or (with a datastore) in the
datastore's text; it advances by that length, or by one token when nothing matches. The metric is
response tokens / pointer advances: the mean accepted length of speculative decoding with a search tree
that indexes all seen history.
"""

from __future__ import annotations

from specviz.index.suffix_array import SuffixArray


def _longest_in_history(history: list[int], response: list[int], at: int, limit: int) -> int:
    """Longest l with response[at:at+l] a substring of history (naive scan; histories are short)."""
    best = 0
    first = response[at]
    for start in range(len(history)):
        if history[start] != first:
            continue
        length = 0
        while (at + length < len(response) and start + length < len(history) and length < limit
               and history[start + length] == response[at + length]):
            length += 1
        best = max(best, length)
    return best


def _longest_in_array(index: SuffixArray, response: list[int], at: int, limit: int) -> int:
    lo, hi, length = 0, len(index.sa), 0
    while at + length < len(response) and length < limit:
        lo, hi = index.narrow(lo, hi, length, response[at + length])
        if lo >= hi:
            break
        length += 1
    return length


def self_repetition(prompt: list[int], response: list[int], datastore=None, limit: int = 512) -> float:
    if not response:
        return 0.0
    arrays = datastore.indexes() if datastore is not None else []
    advances, at = 0, 0
    while at < len(response):
        history = prompt + response[:at]
        length = _longest_in_history(history, response, at, limit)
        for index in arrays:
            length = max(length, _longest_in_array(index, response, at, limit))
        at += max(1, length)
        advances += 1
    return len(response) / advances
