"""SuffixDecoding's source (`suffix`; Oliaro et al., NeurIPS 2025; vLLM's and SGLang's `suffix` method): two
depth-bounded suffix tries, one over this run's prompt and output, one over the outputs of the process's earlier
runs of the same model (the paper's global tree: an agent asking the same task again finds its earlier answer).
Each step every suffix of the context up to the trie's depth is matched in both; below a match of p tokens a tree
of at most `suffix_factor` x p nodes (the paper's adaptive depth: a longer match earns a larger tree) is grown
best-first by each node's frequency ratio (count(node) / count(parent), multiplied down the path), nodes below
`suffix_min_prob` left out; the tree with the largest sum of those probabilities (its expected accepted tokens)
drafts.

The tries are uncompressed (a node per token), which keeps the walk simple: a context of n tokens costs at most
n x depth nodes. Counts are occurrences: count(node) is how often its string occurred."""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass

from specviz.drafters.base import Drafter
from specviz.params import Param
from specviz.tree import sources
from specviz.tree.draft_tree import ROOT, DraftTree

SOURCE = "suffix"
# the grey of the colour-blind-safe palette's R Cookbook variant (Okabe-Ito's colours are all taken)
sources.register(SOURCE, "retrieval", "#999999", "SuffixDecoding: the most frequent continuations of the longest "
                                                 "matches in suffix tries of prompt + output and earlier answers")

SUFFIX_PARAMS = [
    Param("suffix_depth", 24, 2, 64, int, "suffix: the tries' depth (longest pattern + continuation)"),
    Param("suffix_factor", 1.0, 0.1, 8.0, float, "suffix: a match of p tokens drafts at most factor x p nodes"),
    Param("suffix_min_prob", 0.1, 0.0, 1.0, float, "suffix: nodes whose frequency-estimated chance is below this "
                                                   "are left out"),
    Param("suffix_history", 1000, 0, 10_000, int, "suffix: earlier outputs of this model the global trie keeps "
                                                  "(0 = this run's prompt and output only)"),
]
MATCH_EDGES = (1, 2, 3, 5, 8, 13)  # matched lengths the planner's acceptance model tells apart


class SuffixTrie:
    """Every suffix of the fed sequences, up to `depth` tokens, as a trie of counts. Node 0 is the root."""

    def __init__(self, depth: int):
        self.depth = depth
        self.children: list[dict[int, int]] = [{}]
        self.counts: list[int] = [0]
        self.depths: list[int] = [0]
        self.tokens: list[int] = [-1]  # the token on the edge into each node
        self._free: list[int] = []  # node ids a removal emptied, reused by later insertions

    def _child(self, node: int, token: int) -> int:
        child = self.children[node].get(token)
        if child is None:
            if self._free:
                child = self._free.pop()
                self.children[child], self.counts[child], self.depths[child] = {}, 0, self.depths[node] + 1
                self.tokens[child] = token
            else:
                child = len(self.counts)
                self.children.append({})
                self.counts.append(0)
                self.depths.append(self.depths[node] + 1)
                self.tokens.append(token)
            self.children[node][token] = child
        return child

    def extend(self, active: list[int], token: int) -> list[int]:
        """One more token of a sequence: each open suffix (`active`, the nodes its last depth-1 suffixes end at)
        and a new one from the root grow by it; returns the new open suffixes."""
        grown = []
        for node in (ROOT, *active):
            child = self._child(node, token)
            self.counts[child] += 1
            if self.depths[child] < self.depth:
                grown.append(child)
        self.counts[ROOT] += 1
        return grown

    def add(self, tokens: list[int]) -> None:
        active: list[int] = []
        for token in tokens:
            active = self.extend(active, token)

    def remove(self, tokens: list[int]) -> None:
        """Undo add(tokens): every suffix's counts down by one, emptied nodes dropped."""
        for start in range(len(tokens)):
            node = ROOT
            self.counts[ROOT] -= 1
            for token in tokens[start:start + self.depth]:
                child = self.children[node][token]
                self.counts[child] -= 1
                if self.counts[child] == 0:  # its whole subtree counted only this suffix
                    del self.children[node][token]
                    self._release(child)
                    break
                node = child

    def _release(self, node: int) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            stack.extend(self.children[n].values())
            self.children[n] = {}
            self._free.append(n)

    def match(self, pattern: list[int]) -> int | None:
        node = ROOT
        for token in pattern:
            node = self.children[node].get(token)
            if node is None:
                return None
        return node

    def speculate(self, context: list[int], max_nodes: int, factor: float, min_prob: float) -> "Speculation":
        """The best-scoring tree below any matched suffix of the context (longer matches win ties)."""
        best = Speculation((), 0.0, 0)
        for length in range(1, min(self.depth, len(context)) + 1):
            node = self.match(context[len(context) - length:])
            if node is None:
                break  # a longer suffix cannot match where a shorter one did not
            limit = min(max_nodes, int(length * factor + 1e-6))
            found = self._grow(node, limit, min_prob, length)
            if found.score >= best.score and found.nodes:
                best = found
        return best

    def _grow(self, node: int, limit: int, min_prob: float, length: int) -> "Speculation":
        """Best-first below node: (parent index in the result or -1, token, probability) per drafted node."""
        nodes: list[tuple[int, int, float]] = []
        heap = [(-1.0, 0, node, -1)]  # (-probability, tie-break, trie node, parent's index in nodes)
        order = 1
        while heap and len(nodes) < limit:
            negative, _, at, parent = heapq.heappop(heap)
            if at != node:
                nodes.append((parent, self.tokens[at], -negative))
                parent = len(nodes) - 1
            total = self.counts[at]
            for token, child in self.children[at].items():
                prob = -negative * self.counts[child] / total
                if prob >= min_prob and prob > 0:
                    heapq.heappush(heap, (-prob, order, child, parent))
                    order += 1
        return Speculation(tuple(nodes), sum(p for _, _, p in nodes), length)


@dataclass(frozen=True)
class Speculation:
    nodes: tuple[tuple[int, int, float], ...]  # (parent index or -1, token, frequency-estimated probability)
    score: float                               # the sum of the probabilities: expected accepted tokens
    matched: int                               # the matched suffix's length


class History:
    """The global trie: the outputs of the process's finished runs of one model, the oldest dropped beyond `keep`.
    Shared by every session of the process (behind a lock: visitors' runs finish on their own threads)."""

    def __init__(self, depth: int):
        self.trie, self.outputs, self.lock = SuffixTrie(depth), [], threading.Lock()

    def add(self, output_ids: list[int], keep: int) -> None:
        with self.lock:
            self.trie.add(output_ids)
            self.outputs.append(list(output_ids))
            while len(self.outputs) > keep:
                self.trie.remove(self.outputs.pop(0))

    def speculate(self, context: list[int], max_nodes: int, factor: float, min_prob: float) -> Speculation:
        with self.lock:
            return self.trie.speculate(context, max_nodes, factor, min_prob)


_HISTORIES: dict[tuple[str, int], History] = {}
_HISTORIES_LOCK = threading.Lock()


def history(model: str, depth: int) -> History:
    """The process's global trie for a model and a depth."""
    with _HISTORIES_LOCK:
        return _HISTORIES.setdefault((model, depth), History(depth))


def match_bucket(matched: int, prob: float, far: bool) -> str:
    """'s3h': the largest edge not above the matched length, 'h' where the node's estimated chance is at least
    one half ('l' below), 'g' for a node the global trie (earlier answers) drafted."""
    edge = max(e for e in MATCH_EDGES if e <= matched)
    return f"s{edge}{'h' if prob >= 0.5 else 'l'}{'g' if far else ''}"


class SuffixDrafter(Drafter):
    source = SOURCE

    def __init__(self, model: str, depth: int = 24, factor: float = 1.0, min_prob: float = 0.1, keep: int = 1000):
        self.model, self.depth, self.factor, self.min_prob, self.keep = model, depth, factor, min_prob, keep
        self.local = SuffixTrie(depth)
        self.active: list[int] = []
        self.fed = 0

    def _sync(self, context: list[int]) -> None:
        """Feed the committed tokens not yet in the local trie (at propose: a failed step leaves it as it was)."""
        for token in context[self.fed:]:
            self.active = self.local.extend(self.active, token)
        self.fed = len(context)

    def propose(self, context: list[int], budget: int) -> DraftTree:
        self._sync(context)
        best = self.local.speculate(context, budget, self.factor, self.min_prob)
        far = False
        if self.keep:
            earlier = history(self.model, self.depth).speculate(context, budget, self.factor, self.min_prob)
            if earlier.score > best.score:
                best, far = earlier, True
        tree = DraftTree(context[-1])
        ids: list[int] = []
        for parent, token, prob in best.nodes:
            ids.append(tree.add(ids[parent] if parent >= 0 else ROOT, token, self.source, score=prob,
                                match=best.matched, bucket=match_bucket(best.matched, prob, far), prior=prob))
        return tree

    def finish(self, output_ids: list[int]) -> None:
        if self.keep and output_ids:
            history(self.model, self.depth).add(output_ids, self.keep)


def suffix_drafter(lm, p: dict) -> SuffixDrafter:
    """The suffix drafter for SUFFIX_PARAMS values p."""
    return SuffixDrafter(lm.name, p["suffix_depth"], p["suffix_factor"], p["suffix_min_prob"], p["suffix_history"])
