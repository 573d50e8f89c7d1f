"""Medusa: `medusa_choices`, a static tree of rank paths (level d: Medusa head d's rank), the best tree of N the
measured acceptance supports with every rank below Medusa's top-k and no path deeper than its heads.

Rules read from FasterDecoding/Medusa (medusa/model/utils.py, medusa_model.py at e2a5d20): candidates are each
head's TOPK = 10 best tokens, so a rank of 10 or more reads the next head's slot (wrong silently, or an index error
at the last head); a path deeper than the heads (5 in MedusaConfig's default) indexes past them; a path whose
prefix is missing fails. TensorRT-LLM's MedusaDecodingConfig went with its TensorRT backend (PR #15918).
"""

from __future__ import annotations

import json
from typing import Callable

from specviz.engine_configs.advice import Drafter, DraftShape, EngineAdvice, RulesSource, step_speedup
from specviz.tree.static_tree import RankAcceptance, StaticTree

ENGINE = "Medusa"
RULES = RulesSource(ENGINE, "FasterDecoding/Medusa medusa/model/utils.py and medusa_model.py at e2a5d20 "
                            "(read 2026-11-28)")
TOPK = 10
DEFAULT_HEADS = 5
MOST_TOKENS = 64


def validate(choices: list[list[int]], heads: int = DEFAULT_HEADS) -> list[str]:
    problems = []
    present = {tuple(path) for path in choices}
    for path in choices:
        if any(not 0 <= rank < TOPK for rank in path):
            problems.append(f"{path}: a rank of {TOPK} or more reads the next head's candidates (TOPK = {TOPK})")
        if len(path) > heads:
            problems.append(f"{path}: deeper than the model's {heads} Medusa heads")
        if len(path) > 1 and tuple(path[:-1]) not in present:
            problems.append(f"{path}: its prefix {path[:-1]} is not in the tree")
    return problems


def capped_tree(acceptance: RankAcceptance, tokens: int, heads: int = DEFAULT_HEADS) -> StaticTree:
    """The best tree of up to `tokens` nodes among the supported paths Medusa can hold (the same greedy choice as
    tree.static_tree.best_tree, which is exact: a parent's chance is at least its children's)."""
    fits = [p for p in acceptance.supported() if len(p) <= heads and max(p) < TOPK][:tokens]
    chosen = sorted(fits, key=lambda path: (len(path), path))
    return StaticTree(chosen, [acceptance.chance(path) for path in chosen])


def refusal(drafter: Drafter) -> str | None:
    """Medusa's choices are a tree of ranks any drafter's measurements can suggest (with a note): never refused."""
    return None


def advise(drafter: Drafter, acceptance: RankAcceptance, verify_ms: Callable[[int], float], level_ms: float,
           heads: int = DEFAULT_HEADS) -> EngineAdvice:
    """N of the largest predicted speedup (Medusa's heads all run on the target's last feature: one drafter
    level's cost a step here, whatever the depth)."""
    best_tree, best_speedup = None, -1.0
    for n in range(1, min(MOST_TOKENS, len(acceptance.supported())) + 1):
        tree = capped_tree(acceptance, n, heads)
        speedup = step_speedup(tree.expected_accepted, tree.size + 1, 1, verify_ms, level_ms)
        if tree.size == n and speedup > best_speedup:
            best_tree, best_speedup = tree, speedup
    if best_tree is None:
        best_tree = capped_tree(acceptance, 1, heads)
        best_speedup = step_speedup(best_tree.expected_accepted, best_tree.size + 1, 1, verify_ms, level_ms)
    choices = [list(path) for path in best_tree.paths]
    notes = (f"the chances are {drafter.spec}'s, measured here: a Medusa model's heads have their own, so measure "
             "with them before serving; ranks below 10 and depth up to the heads (default 5) only.",)
    return EngineAdvice(ENGINE, (("medusa_choices", f"{best_tree.size} paths, depth {best_tree.depth}"),),
                        best_tree.expected_accepted, best_speedup, best_tree.size + 1,
                        json.dumps({"medusa_choices": choices}), RULES, notes, tuple(validate(choices, heads)),
                        shape=DraftShape(paths=tuple(best_tree.paths)))
