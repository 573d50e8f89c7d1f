"""An n-gram position index: where a short key occurred before. Every n-gram of length 1..max_len of the tokens fed
(a run's prompt + output) is mapped to the positions right after its occurrences (where a copy of what followed would
start), oldest first.

For keys of at most max_len tokens a hash map of the n-grams ending at each position answers what a suffix automaton
would (every earlier occurrence of the key) in O(max_len) per fed token and O(1) per lookup, with exact positions.
Nothing in it is specific to one method: its user today is ReSpec's retrieval source (drafters/respec.py feeds it,
max_len its `lookback` l <= 8; drafters/scored_retrieval.py scores the positions a key finds).
"""

from __future__ import annotations


class MatchPositions:
    def __init__(self, max_len: int):
        self.max_len = max_len
        self.tokens: list[int] = []
        self.after: dict[tuple[int, ...], list[int]] = {}  # n-gram -> positions following its occurrences

    def feed(self, tokens) -> None:
        """Index the n-grams ending at each new token. An n-gram ending at the newest token is registered
        only when the next token arrives, so that it never matches itself with nothing to copy."""
        for token in tokens:
            end = len(self.tokens)  # the new token's position; n-grams ending at end - 1 now have a follower
            for n in range(1, min(self.max_len, end) + 1):
                self.after.setdefault(tuple(self.tokens[end - n:end]), []).append(end)
            self.tokens.append(int(token))

    def positions(self, key) -> list[int]:
        """Positions that followed earlier occurrences of key, oldest first."""
        return self.after.get(tuple(key), [])

    def continuation(self, position: int, length: int) -> list[int]:
        return self.tokens[position:position + length]
