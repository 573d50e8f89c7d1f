"""READER's short-term trie: every n-gram (up to `depth` tokens) of prompt + generated tokens, with
counts, so that the next-token counts after any key of up to depth - 1 tokens are one descent away.

Feeding a token extends each current suffix state by one child (O(depth) per token). The n-gram ending
at the newest token has no follower yet, so a key never matches itself with nothing to continue.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = 0


@dataclass(frozen=True)
class TrieMatch:
    node: int
    length: int     # tokens of the query's suffix that matched


class NgramTrie:
    def __init__(self, depth: int = 9):
        self.depth = depth
        self.kids: list[dict[int, int]] = [{}]
        self.count: list[int] = [0]
        self.active: list[int] = []   # states of the stream's current suffixes (shorter than depth)
        self.tokens_fed = 0

    def __len__(self) -> int:
        return len(self.count)

    def feed(self, tokens) -> None:
        for token in tokens:
            token = int(token)
            grown = []
            for state in [ROOT] + self.active:
                child = self.kids[state].get(token)
                if child is None:
                    child = len(self.count)
                    self.kids[state][token] = child
                    self.kids.append({})
                    self.count.append(0)
                self.count[child] += 1
                grown.append(child)
            self.active = grown[:self.depth - 1]  # states at depth < self.depth may still grow
            self.tokens_fed += 1

    def _descend(self, key) -> int | None:
        node = ROOT
        for token in key:
            node = self.kids[node].get(int(token))
            if node is None:
                return None
        return node

    def match(self, tail: list[int], missing: int | None = None) -> TrieMatch | None:
        """The longest suffix of tail (at most depth - 1 tokens) that occurred with a follower; missing: a
        length known not to (every longer one fails too)."""
        longest = min(len(tail), self.depth - 1)
        if missing is not None:
            longest = min(longest, missing - 1)
        for length in range(longest, 0, -1):
            node = self._descend(tail[-length:])
            if node is not None and self.kids[node]:
                return TrieMatch(node, length)
        return None

    def extend(self, found: TrieMatch, token: int, tail: list[int]) -> TrieMatch | None:
        """The match after appending token to the query (tail already ends with it)."""
        if found.length + 1 < self.depth:
            child = self.kids[found.node].get(int(token))
            if child is not None and self.kids[child]:
                return TrieMatch(child, found.length + 1)
            return self.match(tail, missing=found.length + 1)
        return self.match(tail)

    def counts(self, found: TrieMatch) -> dict[int, int]:
        return {token: self.count[child] for token, child in self.kids[found.node].items()}
