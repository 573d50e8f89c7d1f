"""The static draft tree a drafter's measured acceptance justifies, as serving engines take one.

A static tree is a set of *rank paths*: (r1, ..., rd) is the node reached by taking the drafter's r1-th most
likely token after the root, then its r2-th most likely after that, and so on (ranks from 0). Greedy
verification accepts that node exactly when the target's next d tokens are those, so over a run's verified
positions the chance that the node is accepted is the share of positions whose true continuation has ranks
(r1, ..., rd) under the drafter. `RankAcceptance` holds those counts.

The accepted draft tokens of a step are the tree's nodes on the true rank path, so the expected accepted
tokens of a tree T are sum over v in T of P(v accepted), for any dependence between levels: no independence
is assumed (Sequoia's dynamic program needs positional independence; Medusa's and EAGLE's greedy best-N-paths
rule does not). A node is accepted only where its parent is, so a child's count never exceeds its parent's,
and the N paths of largest chance (ties: the shallower, then the lower ranks) are a tree: that greedy choice
maximises the expected accepted tokens among all trees of N nodes, exactly, under the measured chances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specviz.errors import SpecvizError

RankPath = tuple[int, ...]
MIN_COUNT = 3  # a path seen fewer times than this is not used: its chance is mostly noise


@dataclass(frozen=True)
class RankAcceptance:
    """How often the target's true continuation followed each rank path of a drafter."""
    drafter: str
    positions: int                      # verified positions observed (each with `depth` tokens after it)
    depth: int                          # deepest level measured
    max_rank: int                       # ranks 0 .. max_rank - 1 were tracked at each level
    counts: dict[RankPath, int] = field(default_factory=dict)

    @classmethod
    def from_rank_sequences(cls, drafter: str, sequences: list[list[int]], depth: int,
                            max_rank: int) -> "RankAcceptance":
        """sequences: per position, the rank under the drafter of each true next token, level by level
        (the drafter teacher-forced along the true path); a rank >= max_rank (or -1: outside what the drafter
        can propose) ends the path."""
        counts: dict[RankPath, int] = {}
        for ranks in sequences:
            path: RankPath = ()
            for rank in ranks[:depth]:
                if not 0 <= rank < max_rank:
                    break
                path = path + (rank,)
                counts[path] = counts.get(path, 0) + 1
        return cls(drafter, len(sequences), depth, max_rank, counts)

    def chance(self, path: RankPath) -> float:
        return self.counts.get(path, 0) / self.positions if self.positions else 0.0

    def supported_chance(self, path: RankPath) -> float:
        """The chance of a path followed at least MIN_COUNT times, else 0 (fewer is mostly noise)."""
        return self.chance(path) if self.counts.get(path, 0) >= MIN_COUNT else 0.0

    def interval(self, path: RankPath, z: float = 1.96) -> tuple[float, float]:
        """Wilson's 95% interval of the chance (what a handful of positions can and cannot say)."""
        n, k = self.positions, self.counts.get(path, 0)
        if not n:
            return 0.0, 1.0
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)

    def supported(self) -> list[RankPath]:
        """The paths seen at least MIN_COUNT times, best first: largest chance, then shallower, then lower ranks
        (a parent always precedes its children: its count is at least theirs)."""
        kept = [path for path, count in self.counts.items() if count >= MIN_COUNT]
        return sorted(kept, key=lambda path: (-self.counts[path], len(path), path))

    def level_table(self, levels: int = 2) -> list[tuple[RankPath, int, float, tuple[float, float]]]:
        """(path, count, chance, interval) of every path of the first levels, in breadth-first order."""
        paths = sorted((p for p in self.counts if len(p) <= levels), key=lambda p: (len(p), p))
        return [(p, self.counts[p], self.chance(p), self.interval(p)) for p in paths]


@dataclass(frozen=True)
class StaticTree:
    """N rank paths in breadth-first order (by depth, then by ranks), each with its measured chance."""
    paths: list[RankPath]
    chances: list[float]

    @property
    def size(self) -> int:
        return len(self.paths)

    @property
    def depth(self) -> int:
        return max((len(p) for p in self.paths), default=0)

    @property
    def expected_accepted(self) -> float:
        """Expected accepted draft tokens a step (the target's own next token comes on top)."""
        return sum(self.chances)


def best_tree(acceptance: RankAcceptance, tokens: int) -> StaticTree:
    """The tree of `tokens` draft nodes with the most expected accepted tokens (the module's docstring says
    why the greedy choice is exact). More tokens than the measured paths support is refused with the largest
    number they do."""
    if tokens < 1:
        raise SpecvizError("A static tree needs at least 1 draft token.")
    candidates = acceptance.supported()
    if tokens > len(candidates):
        raise SpecvizError(
            f"The measurements support at most {len(candidates)} draft tokens for {acceptance.drafter} "
            f"({acceptance.positions} positions; a path counts once it was followed {MIN_COUNT} times): ask for "
            f"{len(candidates)} or fewer, or measure on more prompts or tokens.")
    chosen = sorted(candidates[:tokens], key=lambda path: (len(path), path))
    return StaticTree(chosen, [acceptance.chance(path) for path in chosen])


def expected_curve(acceptance: RankAcceptance) -> list[float]:
    """Expected accepted draft tokens of the best tree of N = 1, 2, ... supported tokens (index N - 1)."""
    total, curve = 0.0, []
    for path in acceptance.supported():
        total += acceptance.chance(path)
        curve.append(total)
    return curve


def expected_speedups(curve: list[float], verify_ms, draft_level_ms: float, depths: list[int]) -> list[float]:
    """Per N (index N - 1): tokens a step (1 + expected accepted) over the step's cost in `ar` steps, where a
    step costs the verify forward of N + 1 tokens (verify_ms(q), this machine's cost curve) and one drafter
    forward per level of the tree (depths[N - 1] levels of draft_level_ms each)."""
    one = verify_ms(1)
    return [(1 + expected) * one / (verify_ms(n + 2) + depth * draft_level_ms)
            for n, (expected, depth) in enumerate(zip(curve, depths))]
