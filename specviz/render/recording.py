"""What the page shows of one generation, live or replayed from a trace: its step records, the text of its
tokens and a few labels. Every view (timeline, accounting, export) reads a Recording, so a trace replays
with no model loaded and a method that lands later needs no special case."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specviz.records.notes import ReSpecNote
from specviz.records.status import ACCEPTED_STATUSES
from specviz.records.step import StepRecord
from specviz.records.trace import Trace


@dataclass
class Recording:
    records: list[StepRecord]
    token_text: Callable[[int], str]
    method: str
    params: dict
    lossless: bool
    temperature: float
    prefill_ms: float
    prompt_ids: list[int]
    label: str                 # what this run is ("live" or the trace it replays and where it was recorded)
    cost_curve: dict | None = None

    @classmethod
    def of_session(cls, session) -> "Recording":
        return cls(records=session.records, token_text=session.token_text, method=session.name,
                   params=dict(session.params), lossless=session.lossless, temperature=session.temperature,
                   prefill_ms=session.prefill_s * 1000, prompt_ids=session.prompt_ids,
                   label=f"live run of {session.name} on {session.lm.name} ({session.lm.mode})",
                   cost_curve=session.cost_curve)

    @classmethod
    def of_trace(cls, trace: Trace, name: str = "trace") -> "Recording":
        return cls(records=trace.steps, token_text=trace.token_text, method=trace.method, params=dict(trace.params),
                   lossless=trace.lossless, temperature=float(trace.params.get("temperature", 0.0) or 0.0),
                   prefill_ms=trace.prefill_ms, prompt_ids=trace.prompt_ids,
                   label=f"replay of {name}: {trace.method} on {trace.model}, {len(trace.steps)} steps, "
                         f"recorded on {trace.recorded_on or 'an unknown machine'}", cost_curve=trace.cost_curve)

    def tokens_until(self, at: int) -> int:
        """Output tokens committed by steps 0..at."""
        return sum(len(r.accepted_tokens) for r in self.records[:at + 1])

    def ms_until(self, at: int) -> float:
        """Wall-clock milliseconds of the prefill and steps 0..at."""
        return self.prefill_ms + sum(r.timings_ms.total for r in self.records[:at + 1])

    def step_of_token(self, index: int) -> tuple[int, int | None] | None:
        """(step, node id) that committed output token `index`; node None for a step's bonus token."""
        seen = 0
        for record in self.records:
            if index < seen + len(record.accepted_tokens):
                k = index - seen
                path = accepted_path(record)
                return record.step, path[k] if k < len(path) else None
            seen += len(record.accepted_tokens)
        return None


def accepted_path(record: StepRecord) -> list[int]:
    """The accepted draft nodes of a step, root to leaf (the committed drafts, in order)."""
    accepted = {n.id: n for n in record.nodes if n.status in ACCEPTED_STATUSES}
    path, parent = [], 0
    while True:
        child = next((n.id for n in accepted.values() if n.parent == parent), None)
        if child is None or len(path) >= record.num_accepted_drafts:
            return path
        path.append(child)
        parent = child


def why_small(record: StepRecord) -> str:
    """Why a step drafted nothing or very little: no match, cold copy-logit rows, or the planner chose
    plain decoding (and what it expected); '' when the tree is not small."""
    drafted = len(record.nodes) - 1
    if drafted >= 3:
        return ""
    reasons = []
    cut = record.plan.cut if record.plan else None
    if cut and cut.kept < cut.offered and cut.kept == drafted:
        reasons.append(f"the planner kept {cut.kept} of {cut.offered} offered nodes: all of them "
                       f"would expect {max(record.plan.expected_curve or [0]):.2f} accepted drafts, and no part of "
                       f"the tree paid for its verify cost over plain decoding "
                       f"(~{cut.expected_tokens_per_s} tok/s expected)")
    for source, share in (record.split or {}).items():
        if share.proposed == 0:
            reasons.append(_SILENT.get(source, f"{source} proposed nothing"))
    if not record.split and drafted == 0:
        reasons.append("this method drafts nothing here (plain decoding)")
    respec = record.note(ReSpecNote)
    if respec is not None and not respec.trigger.fired:
        reasons.append("the entropy trigger did not fire (the model was confident)")
    if not reasons:
        reasons.append("the sources offered only this much")
    return f"{'No' if drafted == 0 else 'Only ' + str(drafted)} draft node{'s' if drafted != 1 else ''}: " + "; ".join(reasons) + "."


_SILENT = {"retrieval": "retrieval found no match of the context's suffix",
           "logits": "the copy-logit rows of the last tokens are cold (never seen, so they propose nothing)",
           "model": "the draft model was not run this step",
           "datastore": "the datastore had no continuation of the context's suffix"}


def user_message(prompt_text: str) -> str:
    """The last user message of a decoded chat prompt (ChatML's <|im_start|>user ... <|im_end|>, as the
    default model's template writes it); the whole text for any other template."""
    start = prompt_text.rfind("<|im_start|>user\n")
    if start < 0:
        return prompt_text
    body = prompt_text[start + len("<|im_start|>user\n"):]
    return body.split("<|im_end|>", 1)[0]


def shown_step(recording: "Recording | None", at: int | None) -> int | None:
    """Index of the step on screen: the timeline's (at, clamped to the run), or the newest when at is None; None
    before the first step."""
    if recording is None or not recording.records:
        return None
    last = len(recording.records) - 1
    return last if at is None else max(0, min(at, last))
