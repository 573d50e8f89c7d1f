"""Step records and traces: what happened at every step, serialisable to JSON and back, unchanged."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class NodeRecord:
    id: int
    parent: int
    depth: int
    token_id: int
    text: str
    sources: list[str]
    status: str                          # root, accepted, rejected, relaxed, unreached
    target_prob: float | None = None     # p_target(token | parent), None for the root
    target_rank: int | None = None       # 0 = the target's argmax
    draft_prob: float | None = None      # where a draft model proposed it
    score: float | None = None           # best score a source gave it
    meta: dict = field(default_factory=dict)  # per source: what it said about the node
    mark: str | None = None              # "transferred": accepted by RAPID's p_hat where p would have refused it


@dataclass
class StepRecord:
    step: int
    prefix_len: int                      # committed tokens (prompt + generated) before this step
    budget: int                          # draft nodes allowed this step
    budget_mode: str                     # "fixed" or "auto"
    nodes: list[NodeRecord]
    accepted_tokens: list[int]           # committed this step: accepted drafts then the bonus token
    accepted_origins: list[str]          # per committed token: its sources joined by "+", or "bonus"
    allocation: dict[str, int]           # draft nodes per source
    timings_ms: dict[str, float]         # draft, verify, forward (inside verify), update, total
    entropy: dict | None = None          # entropy values / trigger decision, for methods that use one
    notes: dict = field(default_factory=dict)  # method-specific extras worth showing

    @property
    def num_accepted_drafts(self) -> int:
        return len(self.accepted_tokens) - 1 if self.accepted_tokens else 0

    def to_dict(self) -> dict:
        return _finite(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> "StepRecord":
        values = dict(data)
        values["nodes"] = [NodeRecord(**n) for n in data["nodes"]]
        return cls(**values)


@dataclass
class Trace:
    model: str
    method: str
    params: dict
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    steps: list[StepRecord] = field(default_factory=list)

    def to_dict(self) -> dict:
        return _finite(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        values = dict(data)
        values["steps"] = [StepRecord.from_dict(s) for s in data["steps"]]
        return cls(**values)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        return cls.from_dict(json.loads(Path(path).read_text()))


def _finite(value):
    """JSON has no NaN: store a missing float as None so that a save/load round trip is exact."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
