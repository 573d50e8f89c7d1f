"""The dynamic EAGLE tree SGLang and TensorRT-LLM build each step (EAGLE-2's rule), simulated from the measured
acceptance by rank: what a static tree of the same size would not be, since the engine picks its nodes by the
drafter's path scores level by level."""

from __future__ import annotations

from specviz.tree.static_tree import RankAcceptance, RankPath, StaticTree


def dynamic_tree(acceptance: RankAcceptance, steps: int, topk: int, total: int) -> StaticTree:
    """The tree of `total` draft nodes the rule keeps, with the measured chances standing in for the drafter's
    path scores (a path's chance is the share of positions whose true continuation it is; the engine scores a
    path by the product of the drafter's probabilities along it):
    - step 1: the root's top-k children, which are the frontier;
    - steps 2..S: each frontier node's top-k children, k^2 candidates, of which the best k are the next frontier;
    - every node generated joins the pool, and the tree is the pool's best `total` (ties: the shallower, then the
      lower ranks, so a parent comes before its children and the tree stays connected).
    SGLang: python/sglang/srt/speculative/spec_utils.py (select_top_k_tokens) and eagle_utils.py
    (organize_draft_results: topk over the whole pool); TensorRT-LLM: _torch/speculative/eagle3_dynamic_tree.py."""
    def best_first(paths: list[RankPath]) -> list[RankPath]:
        return sorted(paths, key=lambda path: (-acceptance.chance(path), len(path), path))

    frontier: list[RankPath] = [(rank,) for rank in range(topk)]
    pool = list(frontier)
    for _ in range(steps - 1):
        children = [path + (rank,) for path in frontier for rank in range(topk)]
        pool += children
        frontier = best_first(children)[:topk]
    chosen = set(best_first(pool)[:total])
    # a node whose parent fell out of the chosen set (a tie at chance 0) cannot be verified
    kept = sorted((p for p in chosen if all(p[:d] in chosen for d in range(1, len(p)))), key=lambda p: (len(p), p))
    return StaticTree(kept, [acceptance.chance(path) for path in kept])


def pool_size(steps: int, topk: int) -> int:
    """Nodes the rule generates in all: k at step 1, k^2 at each later step."""
    return topk + (steps - 1) * topk * topk
