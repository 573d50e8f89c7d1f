"""The dynamic EAGLE tree SGLang and TensorRT-LLM build each step (EAGLE-2's rule), simulated from the measured
acceptance by rank, and the search for the rule's settings of the largest predicted speedup. Unlike a static tree of
the same size, the engine picks its nodes by the drafter's path scores level by level."""

from __future__ import annotations

from typing import Callable

from specviz.engine_configs.advice import step_speedup
from specviz.tree.static_tree import RankAcceptance, RankPath, StaticTree

MOST_TOPK, MOST_TOKENS = 8, 64  # the settings searched: top-k up to 8, up to 64 tokens verified a step


def dynamic_tree(acceptance: RankAcceptance, steps: int, topk: int, total: int) -> StaticTree:
    """The tree of `total` draft nodes the rule keeps, with the measured chances (of paths followed at least
    MIN_COUNT times; 0 otherwise) standing in for the drafter's path scores (the engine scores a path by the product
    of the drafter's probabilities along it):
    - step 1: the root's top-k children, which are the frontier;
    - steps 2..S: each frontier node's top-k children, k^2 candidates, of which the best k are the next frontier;
    - every node generated joins the pool, and the tree is the pool's best `total` (ties: the shallower, then the
      lower ranks; a child's chance never tops its parent's, so a parent comes first and the tree is connected).
    SGLang: python/sglang/srt/speculative/spec_utils.py (select_top_k_tokens) and eagle_utils.py
    (organize_draft_results: topk over the whole pool); TensorRT-LLM: _torch/speculative/eagle3_dynamic_tree.py."""
    chance = acceptance.supported_chance

    def best_first(paths: list[RankPath]) -> list[RankPath]:
        return sorted(paths, key=lambda path: (-chance(path), len(path), path))

    frontier: list[RankPath] = [(rank,) for rank in range(topk)]
    pool = list(frontier)
    for _ in range(steps - 1):
        children = [path + (rank,) for path in frontier for rank in range(topk)]
        pool += children
        frontier = best_first(children)[:topk]
    kept = sorted(best_first(pool)[:total], key=lambda path: (len(path), path))
    return StaticTree(kept, [chance(path) for path in kept])


def pool_size(steps: int, topk: int) -> int:
    """Nodes the rule generates in all: k at step 1, k^2 at each later step."""
    return topk + (steps - 1) * topk * topk


def plan(acceptance: RankAcceptance, verify_ms: Callable[[int], float], level_ms: float,
         allowed: Callable[[int, int, int], bool] = lambda steps, topk, drafts: True) -> tuple[int, int, int, float]:
    """(S, k, N, expected accepted) of the largest predicted speedup under the rule, among the settings
    allowed(S, k, N - 1) takes (an engine's own limits; k = 1 always means N = S + 1, a chain): per (S, k) the
    rule's pool in best-first order, whose first N - 1 nodes are the tree of N."""
    best, best_speedup = (1, 1, 2, acceptance.supported_chance((0,))), -1.0
    for steps in range(1, acceptance.depth + 1):
        for topk in range(1, min(acceptance.max_rank, MOST_TOPK) + 1):
            pool = dynamic_tree(acceptance, steps, topk, pool_size(steps, topk))
            order = sorted(zip(pool.chances, pool.paths), key=lambda c: (-c[0], len(c[1]), c[1]))
            largest = steps + 1 if topk == 1 else min(MOST_TOKENS, len(order) + 1)
            accepted = 0.0
            for tokens in range(2, largest + 1):
                accepted += order[tokens - 2][0]
                if topk == 1 and tokens != steps + 1 or not allowed(steps, topk, tokens - 1):
                    continue
                speedup = step_speedup(accepted, tokens, steps, verify_ms, level_ms)
                if speedup > best_speedup:
                    best, best_speedup = (steps, topk, tokens, accepted), speedup
    return best
