"""Step records and traces: what happened at every step, serialisable to JSON and back, unchanged."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from specviz.errors import SpecvizError

# 1: the first traces (no version field). 2: format_version, the token texts, the decoded prompt, the
# machine it was recorded on, prefill time, the declared losslessness and the verify cost curve, so that
# a trace replays with no model loaded.
FORMAT_VERSION = 2
MAX_TRACE_BYTES = 20 * 1024 * 1024  # a 500-step run of budget 64 is about 6 MB


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
    format_version: int = FORMAT_VERSION
    token_texts: dict[str, str] = field(default_factory=dict)  # str(token id) -> its text, every id shown
    prompt_text: str = ""                # the prompt as the model read it (decoded ids)
    recorded_on: str = ""                # machine, device, precision, threads
    prefill_ms: float = 0.0
    lossless: bool = True                # what the method declared for its parameters and temperature
    cost_curve: dict | None = None       # measured verify cost: {"sizes": [...], "ms": [...]}

    def token_text(self, token: int) -> str:
        return self.token_texts.get(str(token), f"<{token}>")

    def to_dict(self) -> dict:
        return _finite(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        """A trace from its JSON object; anything else gets a message saying what is wrong."""
        if not isinstance(data, dict) or not {"model", "method", "params", "prompt_ids", "steps"} <= data.keys():
            raise SpecvizError("This is not a specviz trace: a trace is a JSON object with model, method, params, "
                               "prompt_ids and steps (export one with Download trace or generate --trace).")
        version = data.get("format_version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise SpecvizError(f"This trace has format version {version!r}; this specviz reads versions up to "
                               f"{FORMAT_VERSION}. Update specviz to replay it.")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["format_version"] = version
        try:
            values["steps"] = [StepRecord.from_dict(s) for s in data["steps"]]
            return cls(**values)
        except (TypeError, KeyError, AttributeError) as error:
            raise SpecvizError(f"This trace is damaged: a step record does not have the fields of version "
                               f"{version} ({error}).") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        path = Path(path)
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise SpecvizError(f"This file is {size / 2**20:.1f} MB; a trace may be at most "
                               f"{MAX_TRACE_BYTES / 2**20:.0f} MB.")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SpecvizError(f"{path.name} is not a specviz trace: it is not JSON text.") from None
        return cls.from_dict(data)


def _finite(value):
    """JSON has no NaN: store a missing float as None so that a save/load round trip is exact."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
