"""Lossless speculative sampling over a tree of deterministic drafts (recursive rejection among siblings)."""

from __future__ import annotations

import torch

from specviz.accept.verification import Verification, make_verification
from specviz.core.tree import ROOT, DraftTree


def sampling_accept(tree: DraftTree, logits: torch.Tensor, temperature: float,
                    generator: torch.Generator) -> Verification:
    """Lossless speculative sampling for drafts that carry no draft distribution (deterministic
    proposals): at each accepted node, try its children in order; child c is accepted with the current
    residual probability p(c), and on refusal p loses c's mass and is renormalised. The bonus token is
    drawn from the residual left at the last accepted node. The output follows the target's sampling
    distribution exactly, whatever the drafts."""
    probs_all = torch.softmax(logits / temperature, dim=-1)
    path, node = [], ROOT
    compared: set[int] = set()
    while True:
        residual = probs_all[node].clone()
        accepted_child = None
        for child in tree.children(node):
            compared.add(child)
            token = tree.tokens[child]
            total = float(residual.sum())
            p_token = float(residual[token]) / total if total > 0 else 0.0
            if torch.rand((), generator=generator).item() < p_token:
                accepted_child = child
                break
            residual[token] = 0.0
        if accepted_child is None:
            bonus = int(torch.multinomial(residual / residual.sum(), 1, generator=generator).item())
            break
        path.append(accepted_child)
        node = accepted_child
    return make_verification(tree, logits, path, bonus, compared)
