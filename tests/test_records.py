"""The typed step records and the trace format (no model): every shipped trace loads into the typed records,
a trace of this version (4) round-trips exactly, version 3 reads without an offered tree, versions 1 and 2 are converted, a newer version is refused, and the
views show a converted trace as they show it saved again."""

import json
import math
from pathlib import Path

import pytest

from specviz.errors import SpecvizError
from specviz.records.charts import PositionChart, SamplingCharts
from specviz.records.notes import (
    DeepenNote,
    MeasuredChoice,
    ModelStageNote,
    ReSpecNote,
    RetrievalCandidate,
    RetrievalReport,
    SearchNote,
    TriggerDecision,
)
from specviz.records.offered import NOT_RANKED, CutNodes
from specviz.records.plan import BudgetCut, PlanDecision, SourceShare
from specviz.records.status import NodeStatus
from specviz.records.step import CommitOrigin, NodeRecord, StepRecord, StepTimings
from specviz.records.trace import FORMAT_VERSION, Trace
from specviz.render import step_panels
from specviz.render.tree_svg import tree_html
from specviz.lab.shipped_traces import shipped_traces
from specviz.render.recording import why_small

ROOT, ACCEPTED, RELAXED, TRANSFERRED, REJECTED, UNREACHED = (
    NodeStatus.ROOT, NodeStatus.ACCEPTED, NodeStatus.RELAXED, NodeStatus.TRANSFERRED, NodeStatus.REJECTED,
    NodeStatus.UNREACHED)


# ---- traces of format version 2 (as shipped until version 4) ------------------------------------------------
V2_TRACES = {path.stem: path for path in sorted((Path(__file__).parent / "fixtures" / "traces_v2").glob("*.json"))}


@pytest.mark.parametrize("name", list(V2_TRACES))
def test_every_version_2_trace_loads_into_typed_records(name, tmp_path):
    path = V2_TRACES[name]
    raw = json.loads(path.read_text())
    assert raw["format_version"] == 2  # older than this format: converted on load
    trace = Trace.load(path)
    assert trace.format_version == FORMAT_VERSION and len(trace.steps) == len(raw["steps"])
    for step, old in zip(trace.steps, raw["steps"]):
        notes = old["notes"]
        assert all(isinstance(n.status, NodeStatus) for n in step.nodes) and step.nodes[0].status is ROOT
        assert [n.status for n in step.nodes] == [n["status"] for n in old["nodes"]]
        assert step.plan.predicted_accepted == notes["predicted_accepted"]
        assert step.plan.expected_curve == notes.get("expected_curve")
        decision = notes.get("budget_decision")
        assert (step.plan.cut is None) == (decision is None)
        if decision:
            assert step.plan.cut == BudgetCut(**decision)
        assert (step.split is None) == ("split" not in notes)
        for source, share in (step.split or {}).items():
            assert share == SourceShare(**notes["split"][source])
        if "sampling" in notes:
            charts = step.sampling.charts
            assert sorted(charts) == sorted(int(k) for k in notes["sampling"]["charts"])
            assert all(isinstance(chart, PositionChart) for chart in charts.values())
        respec = step.note(ReSpecNote)
        assert (respec is not None) == (old["entropy"] is not None)
        if respec:
            assert respec.trigger.fired == old["entropy"]["fired"] and respec.drafted_by == notes["drafted_by"]
            assert (respec.retrieval is not None) == ("retrieval" in notes)
        assert (step.note(SearchNote) is not None) == ("reader_search" in notes)
        assert (step.note(DeepenNote) is not None) == ("reader_deepen" in notes)
        assert (step.note(ModelStageNote) is not None) == ("model_stage" in notes)
    # saved again it is a trace of this version, and it loads back equal
    trace.save(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text())["format_version"] == FORMAT_VERSION
    assert Trace.load(tmp_path / "again.json") == trace


@pytest.mark.parametrize("name", list(V2_TRACES))
def test_views_show_a_converted_trace_as_its_saved_copy(name, tmp_path):
    trace = Trace.load(V2_TRACES[name])
    trace.save(tmp_path / "again.json")
    again = Trace.load(tmp_path / "again.json")
    for old, new in zip(trace.steps, again.steps):
        for view in (step_panels.budget_split_markdown, step_panels.search_step_markdown, why_small):
            assert view(old) == view(new)
        assert step_panels.respec_step_markdown(old, trace.token_text) == step_panels.respec_step_markdown(new, trace.token_text)
        assert step_panels.node_choices(old, trace.token_text) == step_panels.node_choices(new, trace.token_text)
        assert tree_html(old, trace.token_text) == tree_html(new, trace.token_text)


@pytest.mark.parametrize("name", list(shipped_traces()))
def test_every_shipped_trace_is_of_this_version_with_its_offered_trees(name, tmp_path):
    raw = json.loads(shipped_traces()[name].read_text())
    assert raw["format_version"] == FORMAT_VERSION
    trace = Trace.load(shipped_traces()[name])
    trace.save(tmp_path / "again.json")
    assert Trace.load(tmp_path / "again.json") == trace
    planned = [step for step in trace.steps if step.plan is not None and step.plan.cut is not None]
    for step in planned:  # the offered tree is whole: the verified nodes and the cut ones
        cut = len(step.cut_nodes) if step.cut_nodes else 0
        assert step.plan.cut.offered == len(step.nodes) - 1 + cut
        assert all(str(token) in trace.token_texts for token in (step.cut_nodes.tokens if cut else []))
    if trace.params.get("budget") == "auto" and name.split("-")[0] in ("racer", "unified", "reader"):
        assert any(step.cut_nodes for step in planned), "an auto run whose planner never cut anything"


def test_the_shipped_respec_trace_shows_its_decisions():
    trace = Trace.load(shipped_traces()["respec-code-rename"])
    fired = next(step for step in trace.steps if step.note(ReSpecNote).trigger.fired)
    text = step_panels.respec_step_markdown(fired, trace.token_text)
    assert "retrieval **fired**" in text and "| position | EMA score |" in text and "drafted by **" in text
    unified = Trace.load(shipped_traces()["unified-code-rename"])
    text = "\n".join(step_panels.search_step_markdown(step) for step in unified.steps)
    assert "**Widening**" in text and "**Draft model stage**" in text and "**Predicted**" in text


# ---- round trip of today's version ---------------------------------------------------------------------------------
def full_record() -> StepRecord:
    """A step with every kind of typed note, a transfer, a missing float and a key-less trigger (h_min inf)."""
    nodes = [NodeRecord(id=0, parent=-1, depth=0, token_id=5, text=" is", sources=[], status=ROOT),
             NodeRecord(id=1, parent=0, depth=1, token_id=6, text=" Rome", sources=["model"], status=ACCEPTED,
                        target_prob=0.7, target_rank=0, draft_prob=0.6, score=0.6, meta={"model": {"draft_prob": 0.6}},
                        mark=TRANSFERRED),
             NodeRecord(id=2, parent=1, depth=2, token_id=7, text=".", sources=["retrieval"], status=RELAXED,
                        target_prob=0.2, target_rank=1, score=0.5, meta={"retrieval": {"position": 3}}),
             NodeRecord(id=3, parent=0, depth=1, token_id=8, text=" Milan", sources=["logits"], status=REJECTED,
                        target_prob=0.1, target_rank=2, score=0.3),
             NodeRecord(id=4, parent=3, depth=2, token_id=9, text=",", sources=["logits"], status=UNREACHED,
                        target_prob=float("nan"), target_rank=4, score=0.1)]
    choice = MeasuredChoice(mode="auto", tokens_per_s={"model": 15.5, "logits": None}, explore_every=40)
    return StepRecord(
        step=2, prefix_len=30, budget=4, budget_mode="auto", nodes=nodes, accepted_tokens=[6, 7, 11],
        accepted_origins=["model~transferred", "retrieval~relaxed", "bonus"], allocation={"model": 1, "retrieval": 1,
                                                                                           "logits": 2},
        timings_ms={"draft": 1.0, "verify": 30.0, "forward": 28.0, "update": 0.4, "total": 31.4},
        split={"model": SourceShare(offered=64, proposed=1, shared=0),
               "retrieval": SourceShare(offered=63, proposed=2, shared=1)},
        plan=PlanDecision(predicted_accepted=1.25, expected_curve=[0.0, 0.9, 1.2, 1.3, 1.3, 1.31, 1.32],
                          cut=BudgetCut(offered=6, kept=4, expected_accepted=1.3, draft_ms=1.0,
                                        expected_tokens_per_s=70.5),
                          verify_ms=[15.0, 16.0, 16.5, 17.0, 17.2, 19.0, 19.5], learnt_accepted=0.4,
                          unlearnt_accepted=1.1),
        sampling=SamplingCharts(charts={0: PositionChart(tokens=[6, 8], p=[0.7, 0.1], q=[0.6, 0.2], p_hat=[0.72, 0.1],
                                                         out=[0.7, 0.1], tv=0.0),
                                        1: PositionChart(tokens=[7], p=[0.9])}, empty_residuals=1),
        drafter_notes=(ModelStageNote(ran=True, choice=choice),
                       SearchNote(tokens=3, matched=2, index="datastore+trie", datastore="on"),
                       DeepenNote(seed=None, tokens=0),
                       ReSpecNote(trigger=TriggerDecision(entropies=[], confidences=[], key_length=0, h_min=math.inf,
                                                          key=[], matches=0, fired=False),
                                  drafted_by="logits", fallback=choice,
                                  retrieval=RetrievalReport(matched=2, passed=1, candidates=[RetrievalCandidate(
                                      position=9, score=0.5, drafted=2, accepted=1, rate=None, length=16)]))),
        cut_nodes=CutNodes(parents=[1, 5], tokens=[12, 13], sources=["logits", "logits+model"], chances=[0.04, 0.01],
                           ranks=[4, NOT_RANKED]))


def test_a_trace_of_this_version_round_trips_exactly(tmp_path):
    record = full_record()
    record.nodes[4].target_prob = None  # what JSON can hold of a NaN (a trace stores it as null)
    trace = Trace(model="m", method="unified", params={"budget": "auto"}, prompt_ids=[1, 2, 5], output_ids=[6, 7, 11],
                  finish_reason="length", steps=[record], token_texts={"6": " Rome"}, prompt_text="a b",
                  recorded_on="here, 2 threads", prefill_ms=12.5, lossless=False,
                  cost_curve={"sizes": [1, 2], "ms": [10.0, 12.0]})
    trace.save(tmp_path / "t.json")
    loaded = Trace.load(tmp_path / "t.json")
    assert loaded == trace
    assert loaded.steps[0].note(ReSpecNote).trigger.h_min == math.inf
    assert loaded.steps[0].nodes[1].mark is TRANSFERRED and loaded.steps[0].nodes[1].shown_status is TRANSFERRED
    # readable JSON: statuses by name, each drafter note with its kind, chart keys the node ids
    data = json.loads((tmp_path / "t.json").read_text())
    step = data["steps"][0]
    assert data["format_version"] == FORMAT_VERSION == 4
    assert [n["status"] for n in step["nodes"]] == ["root", "accepted", "relaxed", "rejected", "unreached"]
    assert step["nodes"][1]["mark"] == "transferred"
    # origins and timings are typed in the record, and the JSON keeps their old text and keys
    assert step["accepted_origins"] == ["model~transferred", "retrieval~relaxed", "bonus"]
    assert step["timings_ms"] == {"draft": 1.0, "verify": 30.0, "forward": 28.0, "update": 0.4, "total": 31.4}
    origins = loaded.steps[0].accepted_origins
    assert origins[0] == CommitOrigin(("model",), "transferred") and origins[2].bonus and not origins[1].bonus
    assert loaded.steps[0].timings_ms == StepTimings(draft=1.0, verify=30.0, forward=28.0, update=0.4, total=31.4)
    assert str(CommitOrigin.parse("logits+retrieval~relaxed")) == "logits+retrieval~relaxed"
    assert [n["kind"] for n in step["drafter_notes"]] == ["model_stage", "reader_search", "reader_deepen", "respec"]
    assert list(step["sampling"]["charts"]) == ["0", "1"] and step["plan"]["cut"]["kept"] == 4
    assert "notes" not in step and "entropy" not in step
    # the offered tree: the cut nodes columnar, each verified node's planned chance, the priced verify costs
    assert step["cut_nodes"] == {"parents": [1, 5], "tokens": [12, 13], "sources": ["logits", "logits+model"],
                                 "chances": [0.04, 0.01], "ranks": [4, -1]}
    assert loaded.steps[0].cut_nodes.source_list(1) == ["logits", "model"]
    assert step["plan"]["verify_ms"][4] == 17.2 and loaded.steps[0].plan.promised_tokens_per_s(4) == pytest.approx(
        1000 * 2.3 / 18.2)


def test_a_version_3_step_reads_as_a_step_without_an_offered_tree(tmp_path):
    data = full_record().to_dict()
    for key in ("cut_nodes",):
        data.pop(key)
    data["plan"].pop("verify_ms")
    for n in data["nodes"]:
        n.pop("chance")
    trace = {"model": "m", "method": "unified", "params": {}, "prompt_ids": [1], "steps": [data], "format_version": 3}
    (tmp_path / "v3.json").write_text(json.dumps(trace))
    step = Trace.load(tmp_path / "v3.json").steps[0]
    assert step.cut_nodes is None and step.plan.verify_ms is None and all(n.chance is None for n in step.nodes)
    assert "offered" not in tree_html(step, str).split("tv-switch")[0]  # drawn, with nothing cut to switch to


def test_a_missing_float_is_stored_as_null():
    data = full_record().to_dict()
    assert data["nodes"][4]["target_prob"] is None  # NaN has no JSON form
    assert data["drafter_notes"][3]["trigger"]["h_min"] is None  # nor has infinity
    json.dumps(data, allow_nan=False)


def test_a_note_of_an_unknown_kind_is_skipped():
    data = full_record().to_dict()
    data["drafter_notes"].append({"kind": "a later drafter", "what": 1})
    assert StepRecord.from_dict(data).drafter_notes == full_record().drafter_notes


# ---- older and newer versions ------------------------------------------------------------------------------
def version_2_step() -> dict:
    """A step as format version 2 wrote it: one notes dict, ReSpec's trigger in `entropy`."""
    return {
        "step": 0, "prefix_len": 30, "budget": 4, "budget_mode": "auto",
        "nodes": [{"id": 0, "parent": -1, "depth": 0, "token_id": 5, "text": " is", "sources": [], "status": "root",
                   "target_prob": None, "target_rank": None, "draft_prob": None, "score": None, "meta": {},
                   "mark": None},
                  {"id": 1, "parent": 0, "depth": 1, "token_id": 6, "text": " Rome", "sources": ["retrieval"],
                   "status": "relaxed", "target_prob": 0.2, "target_rank": 1, "draft_prob": None, "score": 0.5,
                   "meta": {"retrieval": {"position": 3}}, "mark": None},
                  {"id": 2, "parent": 0, "depth": 1, "token_id": 8, "text": " Milan", "sources": ["logits"],
                   "status": "rejected", "target_prob": 0.1, "target_rank": 2, "draft_prob": None, "score": 0.3,
                   "meta": {}, "mark": None}],
        "accepted_tokens": [6, 11], "accepted_origins": ["retrieval~relaxed", "bonus"], "allocation": {"retrieval": 1},
        "timings_ms": {"draft": 1.0, "verify": 30.0, "forward": 28.0, "update": 0.4, "total": 31.4},
        "entropy": {"entropies": [0.1, 0.2, 0.3], "confidences": [0.6, 0.45, 0.47], "key_length": 2, "h_min": 0.2,
                    "key": [4, 5], "matches": 2, "fired": True},
        "notes": {"split": {"retrieval": {"offered": 64, "proposed": 2, "shared": 0}},
                  "budget_decision": {"offered": 2, "kept": 2, "expected_accepted": 0.9, "draft_ms": 0.5,
                                      "expected_tokens_per_s": 60.1},
                  "expected_curve": [0.0, 0.6, 0.9], "drafted_by": "retrieval",
                  "fallback": {"mode": "auto", "tokens_per_s": {"model": None, "logits": 31.0}},
                  "retrieval": {"matched": 2, "passed": 2, "candidates": [
                      {"position": 3, "score": 0.5, "drafted": 1, "accepted": 1, "rate": 1.0, "length": 16}]},
                  "predicted_accepted": 0.87,
                  "sampling": {"charts": {"0": {"tokens": [6, 8], "p": [0.5, 0.1]}}, "empty_residuals": 0}}}


def version_2_trace() -> dict:
    return {"model": "m", "method": "respec", "params": {"budget": "auto"}, "prompt_ids": [1, 2, 5],
            "output_ids": [6, 11], "finish_reason": "length", "steps": [version_2_step()], "format_version": 2,
            "token_texts": {"6": " Rome", "11": "!"}, "prompt_text": "a b", "recorded_on": "here", "prefill_ms": 3.0,
            "lossless": False, "cost_curve": None}


def test_a_version_2_trace_is_read_into_typed_records():
    trace = Trace.from_dict(version_2_trace())
    step = trace.steps[0]
    assert trace.format_version == FORMAT_VERSION and [n.status for n in step.nodes] == [ROOT, RELAXED, REJECTED]
    assert step.split == {"retrieval": SourceShare(offered=64, proposed=2, shared=0)}
    assert step.plan == PlanDecision(predicted_accepted=0.87, expected_curve=[0.0, 0.6, 0.9], cut=BudgetCut(
        offered=2, kept=2, expected_accepted=0.9, draft_ms=0.5, expected_tokens_per_s=60.1))
    assert step.sampling == SamplingCharts(charts={0: PositionChart(tokens=[6, 8], p=[0.5, 0.1])}, empty_residuals=0)
    note = step.note(ReSpecNote)
    assert step.drafter_notes == (note,)
    assert note.trigger == TriggerDecision(entropies=[0.1, 0.2, 0.3], confidences=[0.6, 0.45, 0.47], key_length=2,
                                           h_min=0.2, key=[4, 5], matches=2, fired=True)
    assert note.drafted_by == "retrieval" and note.fallback == MeasuredChoice("auto", {"model": None, "logits": 31.0})
    assert note.retrieval.candidates == [RetrievalCandidate(position=3, score=0.5, drafted=1, accepted=1, rate=1.0,
                                                            length=16)]
    shown = step_panels.respec_step_markdown(step, trace.token_text)
    assert "retrieval **fired**" in shown and "drafted by **retrieval**" in shown and "`Rome`" not in shown
    assert "relaxed acceptances: `␣Rome`" in shown


def test_a_version_2_unified_step_keeps_its_notes_in_stage_order():
    step = version_2_step()
    step["entropy"] = None
    step["notes"] = {"predicted_accepted": 0.5,
                     "model_stage": {"ran": False, "mode": "auto", "tokens_per_s": {"on": 10.0, "off": 40.0},
                                     "explore_every": 120},
                     "reader_search": {"tokens": 3, "matched": 2, "index": "trie", "datastore": "on"},
                     "reader_deepen": {"seed": None, "tokens": 0}}
    record = Trace.from_dict({**version_2_trace(), "steps": [step]}).steps[0]
    assert record.drafter_notes == (
        ModelStageNote(ran=False, choice=MeasuredChoice("auto", {"on": 10.0, "off": 40.0}, explore_every=120)),
        SearchNote(tokens=3, matched=2, index="trie", datastore="on"), DeepenNote(seed=None, tokens=0))
    assert record.plan == PlanDecision(predicted_accepted=0.5) and record.split is None and record.sampling is None
    shown = step_panels.search_step_markdown(record)
    assert "**Draft model stage** skipped (auto: measured on 10.0 tok/s, off 40.0 tok/s" in shown
    assert "tried every 120 steps" in shown and "**Deepening**: no draft model branch" in shown


def test_a_version_1_trace_is_read_into_typed_records():
    old = version_2_trace()
    for key in ("format_version", "token_texts", "prompt_text", "recorded_on", "prefill_ms", "lossless", "cost_curve"):
        del old[key]
    # RAPID's transfers were once a status of their own: now an accepted node with a mark
    old["steps"][0]["nodes"][1].update(status="transferred", mark=None)
    trace = Trace.from_dict(old)
    node = trace.steps[0].nodes[1]
    assert trace.format_version == FORMAT_VERSION and trace.token_text(6) == "<6>"
    assert node.status is ACCEPTED and node.mark is TRANSFERRED and node.shown_status is TRANSFERRED
    assert trace.steps[0].note(ReSpecNote).drafted_by == "retrieval"


def test_a_newer_version_is_refused_with_a_message(tmp_path):
    newer = {**json.loads(next(iter(shipped_traces().values())).read_text()), "format_version": FORMAT_VERSION + 1}
    path = tmp_path / "newer.json"
    path.write_text(json.dumps(newer))
    with pytest.raises(SpecvizError, match=f"format version {FORMAT_VERSION + 1}; this specviz reads versions up "
                                           f"to {FORMAT_VERSION}"):
        Trace.load(path)


def test_an_unknown_status_is_a_damaged_trace():
    data = version_2_trace()
    data["steps"][0]["nodes"][1]["status"] = "maybe"
    with pytest.raises(SpecvizError, match="damaged"):
        Trace.from_dict(data)
    data = {**version_2_trace(), "format_version": 3, "steps": [full_record().to_dict()]}
    data["steps"][0]["nodes"][2]["status"] = "maybe"
    with pytest.raises(SpecvizError, match="damaged"):
        Trace.from_dict(data)
