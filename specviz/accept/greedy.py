"""Strict greedy verification: the longest path whose tokens are the target's argmax, plus its own next token."""

from __future__ import annotations

import torch

from specviz.accept.verification import LogitTop, Verification, make_verification
from specviz.runtime.verify_output import DeviceSummary
from specviz.tree.draft_tree import ROOT, DraftTree


def greedy_accept(tree: DraftTree, logits: torch.Tensor, entropies: bool = False,
                  summary: DeviceSummary | None = None) -> Verification:
    """Strict greedy verification: follow the child whose token is the target's argmax, as far as it goes.
    entropies: have the native pass give each row's entropy too (verification.top.entropies)."""
    top = LogitTop.of(logits, tree, entropies, summary)
    argmax = top.argmax
    path, node = [], ROOT
    compared: set[int] = set()
    while True:
        compared.update(tree.children(node))
        child = tree.child_with_token(node, argmax[node])
        if child is None:
            break
        path.append(child)
        node = child
    return make_verification(tree, logits, path, argmax[node], compared, top=top)
