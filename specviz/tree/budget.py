"""The tree budget: how many draft nodes a step may verify. `auto` lets the planner choose by measured time (among
at most AUTO_MAX_NODES offered nodes); a fixed budget verifies up to that many (1..BUDGET_MAX).

Budget is the form the engine and the lab pass around. Its text form ("auto" or the number) is what a user types
(CLI, URL, an A/B side's override) and what JSON holds (a trace's params, a sweep's report): Budget.parse reads
every old form, `setting` and str() give it back."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.errors import SpecvizError
from specviz.params import Param

BUDGET_MAX = 256          # largest fixed tree (draft nodes) a user may ask for
AUTO_MAX_NODES = 64       # budget=auto chooses among at most this many nodes (RACER's capacity)
AUTO_TEXT = "auto"        # the text form of an auto budget (CLI, URL, JSON)
_NODES = Param("budget", 16, 1, BUDGET_MAX, int)


@dataclass(frozen=True)
class Budget:
    """Draft nodes a step may verify: a fixed number (1..BUDGET_MAX), or auto (nodes None: the planner chooses
    by measured time)."""
    nodes: int | None = None   # draft nodes of a fixed budget; None: auto

    def __post_init__(self):
        if self.nodes is not None and (isinstance(self.nodes, bool) or not isinstance(self.nodes, int)
                                       or not 1 <= self.nodes <= BUDGET_MAX):
            raise SpecvizError(f"budget must be between 1 and {BUDGET_MAX}, got {self.nodes!r}.")

    @classmethod
    def parse(cls, value) -> "Budget":
        """A Budget, "auto" (any case) or a whole number of nodes in 1..BUDGET_MAX (an int, or its text: "16");
        SpecvizError otherwise."""
        if isinstance(value, Budget):
            return value
        if isinstance(value, str) and value.strip().lower() == AUTO_TEXT:
            return cls(None)
        return cls(_NODES.coerce(value))

    @property
    def auto(self) -> bool:
        return self.nodes is None

    @property
    def offered_nodes(self) -> int:
        """The most draft nodes the drafters are offered: AUTO_MAX_NODES for auto, else the budget."""
        return AUTO_MAX_NODES if self.nodes is None else self.nodes

    @property
    def mode(self) -> str:
        """A step record's budget_mode: "auto" or "fixed" (the trace format's words)."""
        return AUTO_TEXT if self.nodes is None else "fixed"

    @property
    def setting(self) -> int | str:
        """The JSON and old callers' form: the number of nodes, or "auto"."""
        return AUTO_TEXT if self.nodes is None else self.nodes

    def __str__(self) -> str:
        return str(self.setting)


AUTO_BUDGET = Budget()


def parse_budget(budget) -> int | str:
    """The old form of Budget.parse: "auto" or a whole number of draft nodes in 1..BUDGET_MAX (what a sweep's report
    and the CLI's overhead figures write to JSON)."""
    return Budget.parse(budget).setting
