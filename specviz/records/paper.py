"""A method's paper as data on the method (Method.paper): the settings where the paper and our default differ
(a method parameter, the tree budget, the temperature or top-p), each with both values, the section it comes
from and why we moved; everything else is the same. Where the paper's mechanism is one specviz does not have
(a dataset we cannot ship, a drafter we train ourselves, a tree we merge), `ours` lists it with the paper's
value beside ours: the page's *Paper's settings* button cannot set those (lab.paper_settings)."""

from __future__ import annotations

from dataclasses import dataclass

PAPER_RUN_SETTINGS = ("budget", "temperature", "top_p")  # settings a click sets besides the method's parameters


@dataclass(frozen=True)
class Change:
    name: str          # a method parameter, or one of PAPER_RUN_SETTINGS
    paper: object      # the paper's value
    ours: object       # our default
    where: str         # the section (or code) the paper's value comes from
    why: str           # what our default buys


@dataclass(frozen=True)
class OwnChoice:
    """A departure the button cannot undo: the paper's mechanism or data is not specviz's."""
    what: str
    paper: str
    ours: str


@dataclass(frozen=True)
class PaperSettings:
    method: str                     # the method whose paper it is (an ablation shares its parent's)
    paper: str                      # the paper and where the values come from
    changes: tuple[Change, ...]
    ours: tuple[OwnChoice, ...] = ()

    def values(self, which: str) -> dict[str, object]:
        """The settings of `which` ("paper" or "ours"): every changed name with its value."""
        return {c.name: (c.paper if which == "paper" else c.ours) for c in self.changes}

    def params(self, which: str) -> dict[str, object]:
        """values(which) without the run settings: the method's own parameters."""
        return {k: v for k, v in self.values(which).items() if k not in PAPER_RUN_SETTINGS}


# departures several papers share
BUDGET_WHY = ("the planner keeps, every step, the nodes whose chance pays for their verify cost on this "
              "machine; a fixed budget verifies the whole offered tree")
# EAGLE-2 as its repository runs it (EaModel.from_pretrained: total_token=60, depth=5 levels after the
# root's, top_k=10): the tree ReSpec falls back to and READER's speculator is sized like
EAGLE2_WHY = ("on a CPU a 60-node, 6-level head tree costs more than it brings: 24 nodes over 2 levels of "
              "4 x 4 measured fastest here (docs/benchmarks.md)")
OUR_HEAD = OwnChoice("draft head", "EAGLE's published head (EAGLE-2 for ReSpec, EAGLE-3 for READER), trained with "
                     "0.1 x cross-entropy, uniform feature noise, lr 3e-5, 20 epochs",
                     "our own head for the shipped model (`python -m specviz train-head`): smooth-L1 + 0.5 x "
                     "cross-entropy, no feature noise, lr 1e-3, 3 epochs")
