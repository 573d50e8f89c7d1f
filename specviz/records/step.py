"""One step's record: every node of the verified tree with its status, what was committed, the nodes the
planner cut, and the typed notes of how the tree was drafted and sized (split, plan, sampling charts, the
drafters' own notes).
to_dict / from_dict are this format version's JSON form (records.trace reads the older ones)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from specviz.records.charts import SamplingCharts
from specviz.records.notes import DrafterNote, note_from_dict
from specviz.records.offered import CutNodes
from specviz.records.plan import PlanDecision, SourceSplit, split_from_dict
from specviz.records.status import NodeStatus

Note = TypeVar("Note", bound=DrafterNote)


@dataclass
class NodeRecord:
    id: int
    parent: int
    depth: int
    token_id: int
    text: str
    sources: list[str]
    status: NodeStatus
    target_prob: float | None = None     # p_target(token | parent), None for the root
    target_rank: int | None = None       # 0 = the target's argmax
    draft_prob: float | None = None      # where a draft model proposed it
    score: float | None = None           # best score a source gave it
    meta: dict = field(default_factory=dict)  # per source: what it said about the node
    mark: NodeStatus | None = None       # TRANSFERRED: accepted by RAPID's p_hat where p would have refused it
    chance: float | None = None          # the planner's calibrated chance that it is accepted (None: not planned)

    @property
    def shown_status(self) -> NodeStatus:
        """The status a view draws: the mark where there is one (transferred), else the status."""
        return self.mark or self.status

    @classmethod
    def from_dict(cls, data: dict) -> "NodeRecord":
        mark = data.get("mark")
        return cls(**{**data, "status": NodeStatus(data["status"]), "mark": None if mark is None else NodeStatus(mark)})


@dataclass(frozen=True)
class StepTimings:
    """Where one step's time went, in milliseconds (a trace's "timings_ms" object, with these keys)."""
    draft: float = 0.0      # ms: the drafters and the planner's cut
    verify: float = 0.0     # ms: the target's tree forward and the acceptance rule
    forward: float = 0.0    # ms: the tree forward alone (inside verify)
    update: float = 0.0     # ms: committing (cache, drafters' updates, the step record)
    total: float = 0.0      # ms: the whole step (draft + verify + update)

    @classmethod
    def from_dict(cls, data: dict) -> "StepTimings":
        """A trace's timings_ms object: a key it lacks (an old or hand-written trace) reads as 0 ms, one this
        version does not know is left out."""
        if not isinstance(data, dict):
            raise TypeError(f"timings_ms is not an object: {type(data).__name__}")
        return cls(**{key: data[key] for key in _TIMING_KEYS if key in data})


_TIMING_KEYS = ("draft", "verify", "forward", "update", "total")


@dataclass(frozen=True)
class CommitOrigin:
    """How one committed token came: the sources whose draft node the target accepted (sorted) and the rule that
    bent acceptance for it, or the step's bonus token (the target's own, no sources). A trace stores it as text:
    the sources joined by "+", then "~" and the mark ("logits+retrieval~relaxed"), or "bonus"."""
    sources: tuple[str, ...] = ()   # empty: the bonus token
    mark: str | None = None         # a bent rule's status (relaxed, transferred); a foreign trace's text as it is

    @property
    def bonus(self) -> bool:
        return not self.sources

    @classmethod
    def parse(cls, text: str) -> "CommitOrigin":
        """The trace's text form back (any text reads, and str() gives it back unchanged)."""
        if text == BONUS:
            return cls()
        joined, tilde, mark = text.partition("~")
        return cls(tuple(joined.split("+")), mark if tilde else None)

    def __str__(self) -> str:
        if self.bonus:
            return BONUS
        return "+".join(self.sources) + (f"~{self.mark}" if self.mark is not None else "")


BONUS = "bonus"   # a bonus token's origin as text
BONUS_ORIGIN = CommitOrigin()


@dataclass
class StepRecord:
    step: int
    prefix_len: int                      # committed tokens (prompt + generated) before this step
    budget: int                          # draft nodes allowed this step
    budget_mode: str                     # "fixed" or "auto" (tree.budget.Budget.mode: the trace's words)
    nodes: list[NodeRecord]
    accepted_tokens: list[int]           # committed this step: accepted drafts then the bonus token
    accepted_origins: list[CommitOrigin]  # per committed token: how it came (its text form is read too)
    allocation: dict[str, int]           # draft nodes per source
    timings_ms: StepTimings              # draft, verify, forward (inside verify), update, total (a dict is read too)
    split: SourceSplit | None = None     # per source: offered, proposed, shared (None: no draft stage)
    plan: PlanDecision | None = None     # what the planner expected (None: a version-1 trace that had no plan)
    sampling: SamplingCharts | None = None  # temperature > 0: p (q, p_hat) at the visited positions
    drafter_notes: tuple[DrafterNote, ...] = ()  # what each drafter said about its step, in stage order
    cut_nodes: CutNodes | None = None    # what the sources offered and the planner cut (None: nothing cut, or
    #                                      a trace older than format version 4)

    def __post_init__(self):
        # the text and dict forms the trace stores (and records built by hand) read into the typed ones
        if not isinstance(self.timings_ms, StepTimings):
            self.timings_ms = StepTimings.from_dict(self.timings_ms)
        if not isinstance(self.accepted_origins, list):
            raise TypeError(f"accepted_origins is not a list: {type(self.accepted_origins).__name__}")
        if any(not isinstance(o, CommitOrigin) for o in self.accepted_origins):
            self.accepted_origins = [o if isinstance(o, CommitOrigin) else CommitOrigin.parse(o)
                                     for o in self.accepted_origins]

    @property
    def num_accepted_drafts(self) -> int:
        return len(self.accepted_tokens) - 1 if self.accepted_tokens else 0

    def note(self, kind: type[Note]) -> Note | None:
        """The step's note of one drafter kind (ReSpecNote, SearchNote ...), None where none wrote one."""
        for note in self.drafter_notes:
            if isinstance(note, kind):
                return note
        return None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["accepted_origins"] = [str(origin) for origin in self.accepted_origins]  # the trace's text form
        data["drafter_notes"] = [note.to_dict() for note in self.drafter_notes]  # each with its kind
        return json_ready(data)

    @classmethod
    def from_dict(cls, data: dict) -> "StepRecord":
        values = dict(data)
        values["nodes"] = [NodeRecord.from_dict(n) for n in data["nodes"]]
        values["split"] = split_from_dict(data.get("split"))
        values["plan"] = None if data.get("plan") is None else PlanDecision.from_dict(data["plan"])
        values["sampling"] = None if data.get("sampling") is None else SamplingCharts.from_dict(data["sampling"])
        notes = (note_from_dict(n) for n in data.get("drafter_notes", ()))
        values["drafter_notes"] = tuple(note for note in notes if note is not None)
        values["cut_nodes"] = CutNodes.from_dict(data.get("cut_nodes"))
        return cls(**values)


def json_ready(value):
    """value as JSON writes it back unchanged: JSON has no NaN, so a float that is not finite is stored as None
    (a save/load round trip is exact), and tuples become lists, as JSON would make them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value
