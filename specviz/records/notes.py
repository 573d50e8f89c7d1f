"""What a drafter says about its own last step (Drafter.step_note), one record per drafter kind: READER's
search and deepening, unified's gated model stage, ReSpec's trigger, retrieval and fallback. The views
read them from StepRecord.drafter_notes; a trace stores each with its `kind`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar


@dataclass(frozen=True)
class DrafterNote:
    kind: ClassVar[str] = ""   # the note's name in a trace

    @classmethod
    def from_dict(cls, data: dict) -> "DrafterNote":
        return cls(**data)

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class MeasuredChoice:
    """What a measured choice (drafters.measured_choice) has measured so far."""
    mode: str                                # "auto" or the kind the user fixed
    tokens_per_s: dict[str, float | None]    # per kind: committed tokens per second (None: not tried yet)
    explore_every: int | None = None         # auto, once every kind was tried: steps between two tries of the other


# ---- READER / unified -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchNote(DrafterNote):
    """READER's widening search: one branch at the root."""
    kind: ClassVar[str] = "reader_search"
    tokens: int              # tokens the search found
    matched: int             # tokens of the query's suffix the first lookup matched
    index: str | None        # which index answered first ("trie", "datastore", both joined by "+"), None: none
    datastore: str           # "on", or why the datastore is off


@dataclass(frozen=True)
class DeepenNote(DrafterNote):
    """READER's deepening search, seeded on the draft model's best path."""
    kind: ClassVar[str] = "reader_deepen"
    seed: int | None                 # the seed node (None: no draft model branch to seed it)
    tokens: int                      # tokens searched below it
    seed_depth: int | None = None


@dataclass(frozen=True)
class ModelStageNote(DrafterNote):
    """unified's gated draft model stage: whether it ran, and what the measured choice knows."""
    kind: ClassVar[str] = "model_stage"
    ran: bool
    choice: MeasuredChoice

    @classmethod
    def from_dict(cls, data: dict) -> "ModelStageNote":
        return cls(ran=data["ran"], choice=MeasuredChoice(**data["choice"]))


# ---- ReSpec ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TriggerDecision:
    """ReSpec's entropy trigger (drafters.entropy_trigger) at one step."""
    entropies: list[float]      # H_k for k = 1..l (as many as the context allows)
    confidences: list[float]    # C_k = H_k + lambda_e / k
    key_length: int             # k*
    h_min: float                # H_k* (inf: no key to measure yet)
    key: list[int]              # the last k* tokens
    matches: int                # earlier occurrences of the key
    fired: bool                 # H_min <= theta_entropy and the key was found

    @classmethod
    def from_dict(cls, data: dict) -> "TriggerDecision":
        # JSON has no infinity: a trace stores the no-key step's h_min as null
        return cls(**{**data, "h_min": math.inf if data["h_min"] is None else data["h_min"]})


@dataclass(frozen=True)
class RetrievalCandidate:
    """One match position ReSpec's retrieval selected, after the step's score update."""
    position: int               # index in prompt + output where the copied continuation starts
    score: float                # EMA score before this step's update
    drafted: int                # nodes of its continuation the verified tree held
    accepted: int               # of those, tokens the target accepted
    rate: float | None          # R used in the update (None: not tried)
    length: int                 # tokens of the continuation


@dataclass(frozen=True)
class RetrievalReport:
    matched: int                # positions the key had
    passed: int                 # of those, positions at or above theta_score
    candidates: list[RetrievalCandidate]

    @classmethod
    def from_dict(cls, data: dict) -> "RetrievalReport":
        return cls(matched=data["matched"], passed=data["passed"],
                   candidates=[RetrievalCandidate(**c) for c in data["candidates"]])


@dataclass(frozen=True)
class ReSpecNote(DrafterNote):
    """ReSpec's step: the trigger's decision, who drafted, the fallback's measurements, the retrieval."""
    kind: ClassVar[str] = "respec"
    trigger: TriggerDecision
    drafted_by: str                           # "retrieval", "model" or "logits"
    fallback: MeasuredChoice
    retrieval: RetrievalReport | None = None  # where the trigger fired

    @classmethod
    def from_dict(cls, data: dict) -> "ReSpecNote":
        retrieval = data.get("retrieval")
        return cls(trigger=TriggerDecision.from_dict(data["trigger"]), drafted_by=data["drafted_by"],
                   fallback=MeasuredChoice(**data["fallback"]),
                   retrieval=None if retrieval is None else RetrievalReport.from_dict(retrieval))


NOTE_KINDS: dict[str, type[DrafterNote]] = {cls.kind: cls for cls in (SearchNote, DeepenNote, ModelStageNote, ReSpecNote)}


def note_from_dict(data: dict) -> DrafterNote | None:
    """A note from its trace form; None for a kind this specviz does not know (a later drafter's note:
    the views show what they know and skip the rest)."""
    kind = NOTE_KINDS.get(data.get("kind"))
    return None if kind is None else kind.from_dict({k: v for k, v in data.items() if k != "kind"})
