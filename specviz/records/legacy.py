"""Step records of format versions 1 and 2 read into the typed records. Those steps kept what the session
and the drafters said in one `notes` dict (split, budget_decision, expected_curve, predicted_accepted,
sampling, reader_search, reader_deepen, model_stage, drafted_by, fallback, retrieval) and ReSpec's
trigger decision in `entropy`; a node RAPID's p_hat accepted may say status "transferred"."""

from __future__ import annotations

from specviz.records.charts import SamplingCharts
from specviz.records.notes import (DeepenNote, DrafterNote, MeasuredChoice, ModelStageNote, ReSpecNote,
                                   RetrievalReport, SearchNote, TriggerDecision)
from specviz.records.plan import BudgetCut, PlanDecision, split_from_dict
from specviz.records.status import NodeStatus
from specviz.records.step import NodeRecord, StepRecord

_CUT_FIELDS = ("offered", "kept", "expected_accepted", "draft_ms", "expected_tokens_per_s")
_STEP_FIELDS = ("step", "prefix_len", "budget", "budget_mode", "accepted_tokens", "accepted_origins",
                "allocation", "timings_ms")


def step_from_v2(data: dict) -> StepRecord:
    """A version 1 or 2 step (a JSON object) as a typed StepRecord."""
    notes = data.get("notes") or {}
    return StepRecord(**{name: data[name] for name in _STEP_FIELDS},
                      nodes=[_node(n) for n in data["nodes"]], split=split_from_dict(notes.get("split")),
                      plan=_plan(notes), sampling=SamplingCharts.from_dict(notes["sampling"]) if "sampling" in notes else None,
                      drafter_notes=_drafter_notes(notes, data.get("entropy")))


def _node(data: dict) -> NodeRecord:
    if data["status"] == NodeStatus.TRANSFERRED:  # a record's transfer is an accepted node with a mark
        data = {**data, "status": NodeStatus.ACCEPTED, "mark": NodeStatus.TRANSFERRED}
    return NodeRecord.from_dict(data)


def _plan(notes: dict) -> PlanDecision | None:
    if "predicted_accepted" not in notes:
        return None
    decision = notes.get("budget_decision")
    curve = notes.get("expected_curve", decision.get("expected_curve") if decision else None)
    return PlanDecision(predicted_accepted=notes["predicted_accepted"], expected_curve=curve,
                        cut=BudgetCut(**{k: decision[k] for k in _CUT_FIELDS}) if decision else None)


def _drafter_notes(notes: dict, trigger: dict | None) -> tuple[DrafterNote, ...]:
    """The drafters' notes in the order the step wrote them (stage order)."""
    found: list[DrafterNote] = []
    for key, value in notes.items():
        if key == "reader_search" and value:
            found.append(SearchNote(**value))
        elif key == "reader_deepen" and value:
            found.append(DeepenNote(**value))
        elif key == "model_stage" and value:
            found.append(ModelStageNote(ran=value["ran"], choice=MeasuredChoice(
                **{k: v for k, v in value.items() if k != "ran"})))
        elif key == "drafted_by" and trigger is not None:
            retrieval = notes.get("retrieval")
            found.append(ReSpecNote(trigger=TriggerDecision.from_dict(trigger), drafted_by=value,
                                    fallback=MeasuredChoice(**notes["fallback"]),
                                    retrieval=RetrievalReport.from_dict(retrieval) if retrieval else None))
    return tuple(found)
