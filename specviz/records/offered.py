"""What the sources offered that the verified tree left out: the nodes the planner cut (budget=auto).

A step's record holds every verified node in full (NodeRecord); the cut ones are kept here, columnar and
without text, so that a step of 60 cut nodes costs a few hundred bytes of JSON. Cut node i has the id
len(step.nodes) + i: its parent is a verified node or an earlier cut node, so the offered tree is the
verified nodes plus these, in one id space (a parent always has a smaller id than its children)."""

from __future__ import annotations

from dataclasses import dataclass, field

NOT_RANKED = -1  # a cut node beyond the planner's node limit: never in its best-first order


@dataclass(frozen=True)
class CutNodes:
    parents: list[int] = field(default_factory=list)   # per cut node: its parent's id (verified or cut)
    tokens: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)   # the sources that proposed it, sorted, joined by "+"
    chances: list[float] = field(default_factory=list)  # the planner's calibrated chance of acceptance
    ranks: list[int] = field(default_factory=list)     # its place in the planner's best-first order (0 =
    #                                                    the best node), NOT_RANKED beyond the node limit

    def __len__(self) -> int:
        return len(self.tokens)

    def source_list(self, i: int) -> list[str]:
        return self.sources[i].split("+") if self.sources[i] else []

    @classmethod
    def from_dict(cls, data: dict | None) -> "CutNodes | None":
        return None if data is None else cls(**data)
