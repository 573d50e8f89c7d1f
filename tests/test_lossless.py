"""Greedy fp32 losslessness on the tuning suite: pld, racer and its ablations emit exactly ar's tokens,
with fixed and auto budgets."""

from pathlib import Path

import pytest

from specviz.engine.costmodel import CostModel
from specviz.engine.session import Session
from specviz.engine.suite import load_suite

# the long-context items (2K-7K token documents) have their own, shorter checks in test_rapid
SUITE = [i for i in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl") if i.category != "long-context"]


FLAT_COST = CostModel(sizes=[1, 2, 64, 128], ms=[50.0, 55.0, 120.0, 200.0], context_len=512, model="test",
                      device="cpu", dtype="float32", threads=2)


@pytest.mark.parametrize("item", SUITE, ids=[i.id for i in SUITE])
def test_pld_is_lossless(lm, ar_outputs, item):
    session = Session(lm, "pld", budget=16).start(item.messages)
    session.run(48)
    assert session.output_ids == ar_outputs[item.id]
    assert len(session.output_ids) == 48 or session.finish_reason == "eos"


@pytest.mark.parametrize("item_id", ["sum-lighthouse", "code-rename", "open-poem"])
def test_auto_budget_is_lossless(lm, ar_outputs, item_id):
    item = next(i for i in SUITE if i.id == item_id)
    session = Session(lm, "pld", budget="auto", cost_model=FLAT_COST).start(item.messages)
    session.run(48)
    assert session.output_ids == ar_outputs[item_id]
    cuts = [r.plan.cut for r in session.records if r.plan.cut]
    assert cuts and all(cut.kept <= cut.offered for cut in cuts)


@pytest.mark.parametrize("item", SUITE, ids=[i.id for i in SUITE])
def test_racer_is_lossless(lm, ar_outputs, item):
    """A fixed budget of 32 makes every step verify a wide merged tree (retrieval + copy-logit)."""
    session = Session(lm, "racer", budget=32).start(item.messages)
    session.run(48)
    assert session.output_ids == ar_outputs[item.id]


@pytest.mark.parametrize("method", ["racer", "racer-logits", "racer-retrieval"])
@pytest.mark.parametrize("item_id", ["sum-lighthouse", "code-rename", "open-poem"])
def test_racer_family_auto_budget_is_lossless(lm, ar_outputs, method, item_id):
    item = next(i for i in SUITE if i.id == item_id)
    session = Session(lm, method, budget="auto", cost_model=FLAT_COST).start(item.messages)
    session.run(48)
    assert session.output_ids == ar_outputs[item_id]
    sources = {s for r in session.records for n in r.nodes for s in n.sources}
    expected = {"racer": {"logits", "retrieval"}, "racer-logits": {"logits"}, "racer-retrieval": {"retrieval"}}
    assert sources <= expected[method]
