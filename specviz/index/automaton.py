"""RACER's retrieval index: an Aho-Corasick automaton over the n-grams of prompt + output, with exact counts
and a node capacity enforced by LRU eviction of leaves only.

Feeding a token extends each current suffix state by one child, O(max_ngram); failure links are built after the
prefill and repaired lazily. The trie is our own, not pyahocorasick's: that automaton is static once built, keeps no
counts that grow in place and cannot evict by recency (it serves as an independent counter in the tests).

Design notes: docs/design.md, "specviz/index/automaton.py".
"""

from __future__ import annotations

import heapq
import sys
from collections import OrderedDict
from dataclasses import dataclass

from specviz.errors import SpecvizError

ROOT = 0
MAX_NGRAM = 64
MAX_CAPACITY = 1_000_000


def share(count: int, out_of: int) -> float:
    """How often a continuation followed, smoothed (count / (out_of + 1)): once out of once is 0.5, not
    certainty; nine out of nine is 0.9."""
    return min(1.0, count / (max(out_of, 1) + 1))


@dataclass(frozen=True)
class Continuation:
    """One retrieved draft path: the tokens after a border; per token, its count and its share (how often
    it followed the n-gram before it); the border it came from (depth = how many trailing tokens matched,
    its count); and where the draft-ahead part starts (len(tokens) when there is none)."""
    tokens: tuple[int, ...]
    freqs: tuple[int, ...]
    shares: tuple[float, ...]
    border_depth: int
    border_freq: int
    ahead_from: int


class NgramAutomaton:
    def __init__(self, max_ngram: int = 10, capacity: int = 10_000):
        if not 1 <= int(max_ngram) <= MAX_NGRAM:
            raise SpecvizError(f"The n-gram length must be between 1 and {MAX_NGRAM}, got {max_ngram}.")
        if not 2 <= int(capacity) <= MAX_CAPACITY:
            raise SpecvizError(f"The automaton capacity must be between 2 and {MAX_CAPACITY} nodes, got {capacity}.")
        self.max_ngram, self.capacity = int(max_ngram), int(capacity)
        # node id -> attribute; ids are never reused, so a stale id is simply absent
        self.token: dict[int, int] = {ROOT: -1}
        self.parent: dict[int, int] = {ROOT: -1}
        self.depth: dict[int, int] = {ROOT: 0}
        self.freq: dict[int, int] = {ROOT: 0}
        self.children: dict[int, dict[int, int]] = {ROOT: {}}
        self.fail: dict[int, int] = {}
        self.recency: OrderedDict[int, None] = OrderedDict({ROOT: None})
        self.suffix_states: list[int] = []   # nodes of the stream's current suffixes, shortest first
        self.tokens_fed = 0
        self.evicted = 0
        self._next_id = 1

    # ---- size -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Nodes held, root included."""
        return len(self.token)

    def memory_bytes(self) -> int:
        """Bytes held by the node tables (containers and their entries, small ints excluded)."""
        tables = (self.token, self.parent, self.depth, self.freq, self.fail, self.recency, self.children)
        total = sum(sys.getsizeof(t) for t in tables)
        return total + sum(sys.getsizeof(c) for c in self.children.values())

    # ---- LRU ------------------------------------------------------------------------------------
    def _touch_path(self, node: int) -> None:
        recency, parent = self.recency, self.parent
        while node != -1:
            recency.move_to_end(node)
            node = parent[node]

    def _evict_one(self, keep: int) -> bool:
        """Drop the least recently used leaf other than keep; False when only keep's path is left."""
        for node in self.recency:
            if node != ROOT and node != keep:
                break
        else:
            return False
        if self.children[node]:
            return False  # the oldest node is an ancestor of keep: nothing else is left to evict
        del self.children[self.parent[node]][self.token[node]]
        for table in (self.token, self.parent, self.depth, self.freq, self.children):
            del table[node]
        self.fail.pop(node, None)
        del self.recency[node]
        self.evicted += 1
        return True

    def _child(self, node: int, token: int) -> int | None:
        """node's child for token, made (after evicting a leaf when full) if missing; None if no room. The
        caller touches the child's path next, which leaves the recency order as if node's path had been
        touched first."""
        child = self.children[node].get(token)
        if child is not None:
            return child
        if len(self.token) >= self.capacity:
            self._touch_path(node)  # node and its ancestors must survive the eviction that makes room
            if not self._evict_one(keep=node):
                return None
        child = self._next_id
        self._next_id += 1
        self.token[child], self.parent[child] = token, node
        self.depth[child], self.freq[child] = self.depth[node] + 1, 0
        self.children[child] = {}
        self.children[node][token] = child
        self.recency[child] = None
        return child

    # ---- feeding --------------------------------------------------------------------------------
    def feed(self, tokens) -> None:
        """Append tokens to the stream: every n-gram (n <= max_ngram) ending at each one counts once more."""
        for token in tokens:
            token = int(token)
            extended = []
            # the current suffixes, each one token longer, plus the token alone (a child of the root)
            for state in [ROOT] + self.suffix_states:
                if state not in self.token or self.depth[state] >= self.max_ngram:
                    continue  # evicted meanwhile, or already the longest n-gram we keep
                child = self._child(state, token)
                if child is None:
                    continue
                self.freq[child] += 1
                self._touch_path(child)
                extended.append(child)
            self.freq[ROOT] += 1
            self.suffix_states = [s for s in extended if s in self.token]
            self.tokens_fed += 1

    # ---- failure links ----------------------------------------------------------------------------
    def build_failure_links(self) -> None:
        """All links at once, breadth-first (after the prefill)."""
        self.fail = {}
        frontier = list(self.children[ROOT].values())
        for node in frontier:
            self.fail[node] = ROOT
        while frontier:
            nxt = []
            for node in frontier:
                for token, child in self.children[node].items():
                    self.fail[child] = self._goto_from(self.fail[node], token)
                    nxt.append(child)
            frontier = nxt

    def _goto_from(self, state: int, token: int) -> int:
        """Follow failure links from state until some node has a child for token (or the root)."""
        while True:
            child = self.children[state].get(token)
            if child is not None:
                return child
            if state == ROOT:
                return ROOT
            state = self.failure(state)

    def failure(self, node: int) -> int:
        """The node of the longest proper suffix of node's n-gram (computed lazily, repaired after eviction)."""
        if node == ROOT:
            return ROOT
        link = self.fail.get(node)
        if link is None or link not in self.token:
            parent = self.parent[node]
            link = ROOT if parent == ROOT else self._goto_from(self.failure(parent), self.token[node])
            self.fail[node] = link
        return link

    def failure_chain(self) -> list[int]:
        """The current state (the longest suffix of the stream that is a node) and its failure links
        down to the root, deepest first. Equals the suffix states that survive, in reverse."""
        if not self.suffix_states:
            return []
        chain, node = [], self.suffix_states[-1]
        while node != ROOT:
            chain.append(node)
            node = self.failure(node)
        return chain

    def ngram(self, node: int) -> tuple[int, ...]:
        tokens = []
        while node != ROOT:
            tokens.append(self.token[node])
            node = self.parent[node]
        return tuple(reversed(tokens))

    def count(self, ngram) -> int:
        """How often the n-gram occurred (0 if it never did or its node was evicted)."""
        node = ROOT
        for token in ngram:
            node = self.children[node].get(int(token))
            if node is None:
                return 0
        return self.freq[node]

    # ---- retrieval ------------------------------------------------------------------------------
    def continuations(self, limit: int, min_border_depth: int = 2, draft_ahead: bool = False) -> list[Continuation]:
        """RACER's retrieval: the borders (failure-chain states at depth >= min_border_depth), then the
        `limit` continuation nodes of highest frequency across their subtrees, each as the path from its
        border. Children never outnumber their parent, so a best-first walk yields them in order and
        every selected node's ancestors (up to its border) are selected before it.

        draft_ahead (our addition, off in the paper's setting): a subtree ends at the n-gram length, so a
        long copy stops there. With it, what budget the subtrees leave extends the paths, deepest border
        first, by running the automaton on its own draft: from a path's end, follow failure links to the
        longest matched suffix (at least min_border_depth deep) that has a continuation and take its most
        frequent child."""
        borders = [b for b in self.failure_chain() if self.depth[b] >= min_border_depth]
        for border in borders:
            self._touch_path(border)
        heap = []
        for border in borders:
            for child in self.children[border].values():
                heap.append((-self.freq[child], -self.depth[border], child, border))
        heapq.heapify(heap)
        selected: list[tuple[int, int]] = []
        while heap and len(selected) < limit:
            _, _, node, border = heapq.heappop(heap)
            selected.append((node, border))
            for child in self.children[node].values():
                heapq.heappush(heap, (-self.freq[child], -self.depth[border], child, border))
        # one path per selected node whose selected children do not continue it (the leaves)
        extended = {(self.parent[node], border) for node, border in selected}
        paths = []
        for node, border in selected:
            if (node, border) in extended:
                continue
            walk, chain = node, []
            while walk != border:
                chain.append(walk)
                walk = self.parent[walk]
            chain.reverse()
            # the border's latest occurrence is the stream's own suffix: it has no continuation yet
            before = [self.freq[border] - 1] + [self.freq[n] for n in chain[:-1]]
            paths.append({"tokens": [self.token[n] for n in chain], "freqs": [self.freq[n] for n in chain],
                          "shares": [share(self.freq[n], b) for n, b in zip(chain, before)],
                          "border": border, "end": node, "ahead_from": len(chain)})
        if draft_ahead:
            left = limit - len(selected)
            for path in sorted(paths, key=lambda p: -self.depth[p["border"]]):
                left -= self._draft_ahead(path, left, min_border_depth)
        return [Continuation(tuple(p["tokens"]), tuple(p["freqs"]), tuple(p["shares"]), self.depth[p["border"]],
                             self.freq[p["border"]], p["ahead_from"]) for p in paths]

    def _draft_ahead(self, path: dict, budget: int, min_depth: int) -> int:
        """Append up to budget tokens to a path (see continuations); returns how many were appended."""
        state, added = path["end"], 0
        while added < budget:
            while state != ROOT and not self.children[state]:
                state = self.failure(state)
            if self.depth[state] < min_depth:
                break
            child = max(self.children[state].values(), key=self.freq.__getitem__)
            path["tokens"].append(self.token[child])
            path["freqs"].append(self.freq[child])
            path["shares"].append(share(self.freq[child], self.freq[state]))
            state = child
            added += 1
        return added
