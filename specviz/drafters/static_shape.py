"""A drafter drafting a static tree of rank paths (tree.static_tree) instead of its own shape, and the rank
rule that measures one: node (r1, ..., rd) is its parent's r_d-th most likely token, equal scores by the lower
index first. The head (drafters.head) and a draft model (drafters.draft_model) share both."""

from __future__ import annotations

from typing import Callable

import torch

from specviz.tree.draft_tree import ROOT, DraftTree


def token_ranks(rows: torch.Tensor, targets: torch.Tensor) -> list[int]:
    """Rank of targets[i] (a column index) in score row i: larger scores, then equal ones at a lower index."""
    picked = rows.gather(1, targets[:, None])
    columns = torch.arange(rows.shape[1], device=rows.device)
    ties = ((rows == picked) & (columns[None, :] < targets[:, None])).sum(-1)
    return ((rows > picked).sum(-1) + ties).tolist()


def grow_static(tree: DraftTree, paths: list[tuple[int, ...]], root_row: torch.Tensor, token_at: Callable[[int], int],
                forward_level: Callable[[list[int]], torch.Tensor], source: str) -> DraftTree:
    """Grow `tree` (its root only) into the static tree `paths`, level by level. root_row: the drafter's scores
    after the root; token_at(column): the token id of a score column; forward_level(nodes): the score rows of
    those nodes' children (one drafter forward). A rank past the row's width drafts nothing there."""
    node_of, rows = {(): ROOT}, {(): root_row}
    parents_with_children = {path[:-1] for path in paths}
    for depth in range(1, max(map(len, paths), default=0) + 1):
        level = [path for path in paths if len(path) == depth and path[:-1] in rows]
        for path in level:
            order = rows[path[:-1]].argsort(descending=True, stable=True)
            if path[-1] < order.shape[0]:
                node_of[path] = tree.add(node_of[path[:-1]], token_at(int(order[path[-1]])), source)
        expand = [path for path in level if path in parents_with_children and path in node_of]
        if expand:
            rows.update(zip(expand, forward_level([node_of[path] for path in expand])))
    return tree
