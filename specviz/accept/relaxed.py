"""ReSpec's source-aware verification: strict for every node, relaxed for retrieved ones.

A retrieved token x that is not the target's argmax may still be accepted when it is among the target's
top-k and log p(top1) - log p(x) <= tau, but only as part of a look-ahead: the relaxed token must be
followed by at least m greedy matches (tokens equal to the target's argmax under the drafted prefix). If
it is not, the next position is tried as the next relaxed attempt, until Phi attempts are spent or a
relaxed check fails; what was never confirmed by m greedy matches is not kept. On a chain this is the
paper's current / last loop; on a tree every child that passes a check is tried and the longest confirmed
path wins. Model-drafted nodes (and logits-tree nodes) are only ever accepted strictly.

tau = 0 (or Phi = 0) is plain greedy verification: lossless by construction, ties included.
"""

from __future__ import annotations

import torch

from specviz.runtime.verify_output import DeviceSummary
from specviz.tree.draft_tree import ROOT, DraftTree
from specviz.accept.greedy import greedy_accept
from specviz.accept.verification import LogitTop, Verification, make_verification


class _Relaxer:
    def __init__(self, tree: DraftTree, logits: torch.Tensor, top_k: int, tau: float, min_greedy: int,
                 entropies: bool = False, summary: DeviceSummary | None = None):
        self.tree, self.min_greedy = tree, min_greedy
        self.logit_top = LogitTop.of(logits, tree, entropies, summary)
        self.argmax = self.logit_top.argmax
        top = self.logit_top.values[:, 0].to(logits.device)  # numpy-made (native or device summary): host
        self.ok = [False] * len(tree)  # per node: passes the relaxed check under its parent's logits
        if len(tree) > 1:
            parents = torch.tensor(tree.parents[1:], device=logits.device)
            tokens = torch.tensor(tree.tokens[1:], device=logits.device)
            rows = logits.index_select(0, parents)
            token_logits = rows.gather(1, tokens[:, None])[:, 0]
            rank = (rows > token_logits[:, None]).sum(-1)
            gap = top.index_select(0, parents) - token_logits  # log p(top1) - log p(x): the norms cancel
            passes = ((rank < top_k) & (gap <= tau)).tolist()
            for node in range(1, len(tree)):
                self.ok[node] = passes[node - 1] and "retrieval" in tree.sources[node]

    def greedy_chain(self, node: int) -> list[int]:
        chain = []
        while (child := self.tree.child_with_token(node, self.argmax[node])) is not None:
            chain.append(child)
            node = child
        return chain

    def candidates(self, node: int) -> list[int]:
        """Children of node a relaxed attempt may take: retrieved, in the top-k, within tau."""
        return [c for c in self.tree.children(node) if self.ok[c] and self.tree.tokens[c] != self.argmax[node]]

    def extend(self, node: int, attempts: int) -> list[int]:
        """Best accepted continuation below an accepted node: its greedy chain, then relaxed attempts."""
        chain = self.greedy_chain(node)
        end = chain[-1] if chain else node
        best: list[int] = []
        if attempts > 0:
            for child in self.candidates(end):
                confirmed = self.attempt(child, attempts - 1)
                if confirmed is not None and len(confirmed) > len(best):
                    best = confirmed
        return chain + best

    def attempt(self, node: int, attempts: int) -> list[int] | None:
        """node taken by a relaxed check: confirmed if >= m greedy matches follow it (then go on);
        otherwise the next position is the next attempt. None if never confirmed."""
        follow = self.greedy_chain(node)
        if len(follow) >= self.min_greedy:
            return [node] + self.extend(node, attempts)
        if attempts == 0:
            return None
        best = None
        for child in self.tree.children(node):  # the next position: a greedy match or another relaxed token
            if child != self.tree.child_with_token(node, self.argmax[node]) and not self.ok[child]:
                continue
            further = self.attempt(child, attempts - 1)
            if further is not None and (best is None or 1 + len(further) > len(best)):
                best = [node] + further
        return best


def relaxed_accept(tree: DraftTree, logits: torch.Tensor, top_k: int, tau: float, min_greedy: int,
                   max_attempts: int, entropies: bool = False, summary: DeviceSummary | None = None) -> Verification:
    """Greedy verification with ReSpec's relaxed look-ahead for retrieval nodes (see the module doc).
    entropies: have the native pass give each row's entropy too (verification.top.entropies)."""
    if tau <= 0 or max_attempts <= 0:
        return greedy_accept(tree, logits, entropies, summary)
    relaxer = _Relaxer(tree, logits, top_k, tau, min_greedy, entropies, summary)
    path = relaxer.extend(ROOT, max_attempts)
    relaxed = {n for n in path if tree.tokens[n] != relaxer.argmax[tree.parents[n]]}
    compared = set(tree.children(ROOT))
    for n in path:
        compared.update(tree.children(n))
    last = path[-1] if path else ROOT
    return make_verification(tree, logits, path, relaxer.argmax[last], compared, relaxed, relaxer.logit_top)
