"""DraftTree: a trie of candidate tokens under the last committed token.

Node 0 is the root: the last committed token, whose KV entry is not in the cache yet. It goes into the
verify forward with the draft nodes, and its logits decide the first drafted level. Nodes are stored in
insertion order and a parent always comes before its children, so one pass computes masks and paths.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

if TYPE_CHECKING:
    import torch

from specviz.tree import sources as source_registry

ROOT = 0


class DraftTree:
    def __init__(self, root_token: int):
        self.tokens: list[int] = [int(root_token)]
        self.parents: list[int] = [-1]
        self.depths: list[int] = [0]
        self.sources: list[set[str]] = [set()]
        # per node, per source: what that source said about it (score in [0, 1], rank among siblings,
        # draft probability for a model drafter, anything else worth showing)
        self.meta: list[dict[str, dict]] = [{}]
        self.scores: list[float] = [0.0]  # per node: the best score any source gave it (see score())
        self._child_of: dict[tuple[int, int], int] = {}
        self._children: list[list[int]] = [[]]
        self.positions: list[int] = [0]  # per node: its index among its parent's children (never changes)
        # per parent node: the distribution q (vocab,) a sampling draft model drew that node's child
        # from; that child carries meta["model"]["draws"] = 1
        self.draft_dists: dict[int, "torch.Tensor"] = {}

    # ---- building -------------------------------------------------------------------------------
    def add(self, parent: int, token: int, source: str, score: float = 1.0, **meta) -> int:
        """Add token under parent (or merge into the existing node with that token); return its index."""
        if source not in source_registry.SOURCES:
            raise ValueError(f"unknown source {source!r}")
        token, score = int(token), float(score)
        key = (parent, token)
        node = self._child_of.get(key)
        if node is None:
            node = len(self.tokens)
            self.tokens.append(token)
            self.parents.append(parent)
            self.depths.append(self.depths[parent] + 1)
            self.sources.append({source})
            self.meta.append({})
            self.scores.append(score)
            self._children.append([])
            siblings = self._children[parent]
            self.positions.append(len(siblings))
            siblings.append(node)
            self._child_of[key] = node
        else:
            self.sources[node].add(source)
        node_meta = self.meta[node]
        previous = node_meta.get(source)
        if previous is None or score > previous.get("score", 0.0):
            node_meta[source] = {"score": score, **meta}
            if score > self.scores[node]:
                self.scores[node] = score
        return node

    def add_path(self, tokens: Iterable[int], source: str, parent: int = ROOT,
                 scores: Iterable[float] | None = None, **meta) -> list[int]:
        """Add a chain of tokens below parent; scores default to 1.0."""
        nodes = []
        scores = list(scores) if scores is not None else None
        for i, token in enumerate(tokens):
            parent = self.add(parent, token, source, 1.0 if scores is None else scores[i], **meta)
            nodes.append(parent)
        return nodes

    # ---- reading --------------------------------------------------------------------------------
    @property
    def root_token(self) -> int:
        return self.tokens[ROOT]

    @property
    def num_drafted(self) -> int:
        """Draft nodes, root excluded: what the budget counts."""
        return len(self.tokens) - 1

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        return self._children[node]

    def child_with_token(self, node: int, token: int) -> int | None:
        return self._child_of.get((node, int(token)))

    def draws(self, node: int) -> int:
        """How many times a sampling draft model drew this node from its parent's q (0: never)."""
        return int(self.meta[node].get("model", {}).get("draws", 0))

    def has_draws(self) -> bool:
        """Whether a sampling draft model drew any node of the tree."""
        return any("draws" in meta.get("model", {}) for meta in self.meta[1:])

    def is_deterministic(self, node: int) -> bool:
        """Whether some source proposed the node as a fixed choice (not a draw from a distribution)."""
        return any(source != "model" or "draws" not in meta for source, meta in self.meta[node].items())

    def score(self, node: int) -> float:
        """Best score any source gave the node (what breadth-first truncation keeps)."""
        return self.scores[node]

    def max_depth(self) -> int:
        return max(self.depths)

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to node."""
        path = []
        while node > ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def leaves(self) -> list[int]:
        return [n for n in range(1, len(self.tokens)) if not self._children[n]]

    def paths(self) -> list[list[int]]:
        """Every root-to-leaf path (root included) as node indices."""
        if len(self.tokens) == 1:
            return [[ROOT]]
        return [[ROOT] + self.path_to(leaf) for leaf in self.leaves()]

    def allocation(self) -> dict[str, int]:
        """Draft nodes per source (a node proposed by two sources counts for both); the three families
        always appear, other registered sources when they drafted."""
        counts = {family: 0 for family in source_registry.FAMILIES}
        for node in range(1, len(self.tokens)):
            for s in self.sources[node]:
                counts[s] = counts.get(s, 0) + 1
        return counts

    # ---- combining and cutting -------------------------------------------------------------------
    def union(self, other: "DraftTree") -> "DraftTree":
        """Trie union: a token both trees hold at the same place becomes one node with both sources."""
        return self.select(range(len(self.tokens))).merge(other)

    def merge(self, other: "DraftTree") -> "DraftTree":
        """union() into this tree, in place (a method's pipeline grows its own tree stage by stage)."""
        if other.root_token != self.root_token:
            raise ValueError("trees with different roots cannot be merged")
        mapped = {ROOT: ROOT}
        for node in range(1, len(other.tokens)):
            parent = mapped[other.parents[node]]
            for source, meta in other.meta[node].items():
                mapped[node] = self.add(parent, other.tokens[node], source, **meta)
        for node, dist in other.draft_dists.items():
            self.draft_dists[mapped[node]] = dist
        return self

    def select(self, nodes: Iterable[int]) -> "DraftTree":
        """A new tree of the given nodes (each one's parent must be among them or earlier in the list)."""
        fresh = DraftTree(self.root_token)
        mapped = {ROOT: ROOT}
        for node in sorted(set(nodes) - {ROOT}):
            parent = mapped.get(self.parents[node])
            if parent is None:
                raise ValueError(f"node {node} selected without its parent")
            for source, meta in self.meta[node].items():
                mapped[node] = fresh.add(parent, self.tokens[node], source, **meta)
        for node, dist in self.draft_dists.items():
            if node in mapped:
                fresh.draft_dists[mapped[node]] = dist
        return fresh

    def expansion_order(self, key: Callable[[int], tuple | float] | None = None) -> list[int]:
        """Draft nodes in the order a budget keeps them: smallest key first among nodes whose parent
        is already kept. The default key (depth, -score) is breadth-first, each level best-scored first."""
        key = key or (lambda n: (self.depths[n], -self.score(n), n))
        frontier = [(key(c), c) for c in self._children[ROOT]]
        heapq.heapify(frontier)
        order = []
        while frontier:
            _, node = heapq.heappop(frontier)
            order.append(node)
            for child in self._children[node]:
                heapq.heappush(frontier, (key(child), child))
        return order

    def best_first(self, scores: list[float]) -> list[int]:
        """expansion_order(key=lambda n: (-scores[n], n)) (scores per node, root included): when every
        node's score is at most its parent's, that is all nodes sorted by it, which a sort does in C."""
        negated = [-score for score in scores]
        order = sorted(range(1, len(self.tokens)), key=negated.__getitem__)  # stable: ties lowest index first
        placed = [False] * len(self.tokens)
        placed[ROOT] = True
        parents = self.parents
        for node in order:
            if not placed[parents[node]]:  # a child outscored its parent: the frontier walk decides
                return self.expansion_order(key=lambda n: (-scores[n], n))
            placed[node] = True
        return order

    def truncate(self, budget: int, order: list[int] | None = None) -> "DraftTree":
        """Keep at most budget draft nodes, taken in expansion order (breadth-first by default)."""
        if budget >= self.num_drafted:
            return self
        order = order if order is not None else self.expansion_order()
        return self.select(order[:max(0, budget)])

    # ---- what the verify forward needs -------------------------------------------------------------
    def ancestor_mask(self) -> np.ndarray:
        """mask[i, j] is True when node j is node i or one of its ancestors (tree attention)."""
        n = len(self.tokens)
        mask = np.zeros((n, n), dtype=bool)
        parents = self.parents
        for node in range(n):
            if node:
                mask[node] = mask[parents[node]]
            mask[node, node] = True
        return mask
