"""How an output differs from the lossless (plain greedy) output of the same prompt, token by token."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass
class TokenDiff:
    ops: list[tuple[str, list[int], list[int]]]  # ("equal" | "replace" | "delete" | "insert", lossless, ours)
    differing: int                               # output tokens outside the aligned common blocks
    first_difference: int | None                 # index of the first output token that differs

    @property
    def identical(self) -> bool:
        return self.first_difference is None


def token_diff(lossless: list[int], output: list[int]) -> TokenDiff:
    """Align the two token lists (difflib, no junk heuristic) over the length both have."""
    n = min(len(lossless), len(output))
    reference, ours = list(lossless[:n]), list(output[:n])
    matcher = difflib.SequenceMatcher(None, reference, ours, autojunk=False)
    ops = [(tag, reference[i1:i2], ours[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
    same = sum(block.size for block in matcher.get_matching_blocks())
    first = next((i for i, (a, b) in enumerate(zip(reference, ours)) if a != b), None)
    return TokenDiff(ops=ops, differing=n - same, first_difference=first)


def differing_fraction(lossless: list[int], output: list[int]) -> float:
    n = min(len(lossless), len(output))
    return token_diff(lossless, output).differing / n if n else 0.0
