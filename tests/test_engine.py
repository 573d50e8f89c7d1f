"""Losslessness on real prompts with the real model, and the engine's stopping and error behaviour."""

from pathlib import Path

import pytest

from specviz.accept.sampling import SamplingSettings
from specviz.engine.suite import load_suite
from specviz.engine.costmodel import CostModel
from specviz.engine.session import Session
from specviz.errors import SpecvizError
from specviz.records.status import NodeStatus
from specviz.records.trace import Trace

# the long-context items (2K-7K token documents) have their own, shorter checks in test_rapid
SUITE = [i for i in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl") if i["category"] != "long-context"]
FLAT_COST = CostModel(sizes=[1, 2, 64, 128], ms=[50.0, 55.0, 120.0, 200.0], context_len=512, model="test",
                      device="cpu", dtype="float32", threads=2)


@pytest.fixture(scope="module")
def ar_outputs(lm):
    outputs = {}
    for item in SUITE:
        session = Session(lm, "ar").start(item["messages"])
        session.run(48)
        outputs[item["id"]] = session.output_ids
    return outputs


@pytest.mark.parametrize("item", SUITE, ids=[i["id"] for i in SUITE])
def test_pld_is_lossless(lm, ar_outputs, item):
    session = Session(lm, "pld", budget=16).start(item["messages"])
    session.run(48)
    assert session.output_ids == ar_outputs[item["id"]]
    assert len(session.output_ids) == 48 or session.finish_reason == "eos"


@pytest.mark.parametrize("item_id", ["sum-lighthouse", "code-rename", "open-poem"])
def test_auto_budget_is_lossless(lm, ar_outputs, item_id):
    item = next(i for i in SUITE if i["id"] == item_id)
    session = Session(lm, "pld", budget="auto", cost_model=FLAT_COST).start(item["messages"])
    session.run(48)
    assert session.output_ids == ar_outputs[item_id]
    cuts = [r.plan.cut for r in session.records if r.plan.cut]
    assert cuts and all(cut.kept <= cut.offered for cut in cuts)


@pytest.mark.parametrize("item", SUITE, ids=[i["id"] for i in SUITE])
def test_racer_is_lossless(lm, ar_outputs, item):
    """A fixed budget of 32 makes every step verify a wide merged tree (retrieval + copy-logit)."""
    session = Session(lm, "racer", budget=32).start(item["messages"])
    session.run(48)
    assert session.output_ids == ar_outputs[item["id"]]


@pytest.mark.parametrize("method", ["racer", "racer-logits", "racer-retrieval"])
@pytest.mark.parametrize("item_id", ["sum-lighthouse", "code-rename", "open-poem"])
def test_racer_family_auto_budget_is_lossless(lm, ar_outputs, method, item_id):
    item = next(i for i in SUITE if i["id"] == item_id)
    session = Session(lm, method, budget="auto", cost_model=FLAT_COST).start(item["messages"])
    session.run(48)
    assert session.output_ids == ar_outputs[item_id]
    sources = {s for r in session.records for n in r.nodes for s in n.sources}
    expected = {"racer": {"logits", "retrieval"}, "racer-logits": {"logits"}, "racer-retrieval": {"retrieval"}}
    assert sources <= expected[method]


def test_pld_accepts_drafts_on_copy_prompt(lm):
    item = next(i for i in SUITE if i["id"] == "code-rename")  # the model copies the given code
    session = Session(lm, "pld", budget=16).start(item["messages"])
    session.run(48)
    assert max(r.num_accepted_drafts for r in session.records) >= 3
    assert session.stats()["mean_accepted"] > 1.0
    statuses = {n.status for r in session.records for n in r.nodes}
    assert "accepted" in statuses


def test_ar_is_one_token_per_step(lm):
    session = Session(lm, "ar").start("Say hello.")
    session.run(5)
    assert [len(r.accepted_tokens) for r in session.records] == [1] * len(session.records)
    assert len(session.output_ids) == 5


def test_stops_at_eos_and_limit(lm):
    session = Session(lm, "pld", budget=8).start("Reply with the single word: yes")
    session.run(64)
    assert session.finish_reason == "eos" and session.output_ids[-1] in lm.eos_ids
    with pytest.raises(SpecvizError):
        session.step()
    limited = Session(lm, "pld", budget=8).start("Count from one to fifty in words.")
    limited.run(7)
    assert len(limited.output_ids) == 7 and not limited.finished
    limited.run(12)  # a higher limit carries on
    assert len(limited.output_ids) == 12


def test_context_limit_stops_generation(lm):
    session = Session(lm, "pld", budget=8).start("Write a long story.")
    lm_limit = lm.max_context
    try:
        lm.max_context = len(session.context) + 3
        session.run(50)
    finally:
        lm.max_context = lm_limit
    assert session.finish_reason in ("context", "eos")
    assert len(session.context) <= len(session.prompt_ids) + 3 + 1


def test_sampling_runs_and_is_reproducible(lm):
    runs = []
    for _ in range(2):
        session = Session(lm, "pld", budget=8, sampling=SamplingSettings(0.8, seed=3)).start("Tell me about cats.")
        session.run(16)
        runs.append(session.output_ids)
    assert runs[0] == runs[1] and len(runs[0]) == 16


def test_trace_round_trip(lm, tmp_path):
    session = Session(lm, "pld", budget=8).start("Repeat twice: red green blue, red green blue.")
    session.run(16)
    trace = session.trace()
    path = tmp_path / "trace.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    assert loaded.steps[0].nodes[0].status is NodeStatus.ROOT
    record = loaded.steps[-1]
    assert {"draft", "verify", "forward", "update", "total"} <= record.timings_ms.keys()
    assert set(record.allocation) == {"logits", "retrieval", "model"}


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "nope"}, "Unknown method"),
    ({"method": "pld", "budget": 0}, "budget must be between"),
    ({"method": "pld", "budget": 10_000}, "budget must be between"),
    ({"method": "pld", "params": {"max_ngram": 0}}, "max_ngram must be between"),
    ({"method": "pld", "params": {"tau": 1}}, "has no parameter 'tau'"),
    ({"method": "pld", "sampling": SamplingSettings(-1)}, "temperature"),
])
def test_bad_settings_are_clear_errors(lm, kwargs, message):
    with pytest.raises(SpecvizError, match=message):
        Session(lm, **kwargs)


def test_bad_prompts_are_clear_errors(lm):
    with pytest.raises(SpecvizError, match="empty"):
        Session(lm, "ar").start("   ")
    with pytest.raises(SpecvizError, match="context holds"):
        Session(lm, "ar").start("word " * (lm.max_context + 10))
    with pytest.raises(SpecvizError, match="No prompt"):
        Session(lm, "ar").step()
