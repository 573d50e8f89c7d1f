"""A trace: one generation's set-up and its step records, saved as JSON and loaded back unchanged
(Trace.load of what Trace.save wrote equals the trace). A trace of format version 1 or 2 has its steps
read into today's typed records (records.legacy) and is a trace of today's version from then on; a newer
version is refused with a message."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from specviz.errors import SpecvizError, quoted
from specviz.records.legacy import step_from_v2
from specviz.records.step import StepRecord, json_ready
from specviz.records.trace_check import check_raw, check_trace

# 1: the first traces (no version field). 2: format_version, the token texts, the decoded prompt, the
# machine it was recorded on, prefill time, the declared losslessness and the verify cost curve, so that
# a trace replays with no model loaded. 3: the step's notes typed: split, plan, sampling and drafter_notes
# (each with its kind) instead of one notes dict, ReSpec's trigger inside its drafter note (no entropy field).
# 4: the offered tree: per step the nodes the planner cut (cut_nodes, columnar), each verified node's
# planned chance, the verify costs the planner priced (plan.verify_ms); token_texts cover the cut nodes.
# A version 3 step reads as a version 4 step with none of these.
FORMAT_VERSION = 4
MAX_TRACE_BYTES = 20 * 1024 * 1024  # a 500-step run of budget 64 is about 6 MB


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
        data = json_ready(asdict(replace(self, steps=[])))
        data["steps"] = [step.to_dict() for step in self.steps]
        return data

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
        check_raw(data)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        # an older trace is read into today's records, so it is a trace of this version now (and saves as one)
        values["format_version"] = FORMAT_VERSION
        try:
            read_step = StepRecord.from_dict if version >= 3 else step_from_v2
            if not isinstance(data["steps"], list):
                raise TypeError("steps is not a list")
            values["steps"] = [read_step(s) for s in data["steps"]]
            trace = cls(**values)
        except SpecvizError:
            raise
        except (TypeError, KeyError, AttributeError, ValueError, IndexError) as error:
            raise SpecvizError(f"This trace is damaged: a record does not have the fields of version {version} "
                               f"({quoted(str(error), 120)}).") from None
        check_trace(trace)
        return trace

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        """A trace read and checked. Its sources are checked against the registry, which a drafter fills when it
        is imported (a source lives in its drafter's file): a caller loads the drafters first."""
        path = Path(path)
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise SpecvizError(f"This file is {size / 2**20:.1f} MB; a trace may be at most "
                               f"{MAX_TRACE_BYTES / 2**20:.0f} MB.")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SpecvizError("This file is not a specviz trace: it is not JSON text.") from None
        except RecursionError:  # nesting deeper than the parser goes: no trace nests like that
            raise SpecvizError("This file is not a specviz trace: its JSON nests far too deep.") from None
        return cls.from_dict(data)

