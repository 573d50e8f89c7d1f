"""Greedy fp32 losslessness on the tuning suite: every registered method emits exactly ar's tokens (a short
run each, fixed and auto budgets), and pld, racer and its ablations on every prompt."""

from pathlib import Path

import pytest

from specviz.engine.costmodel import CostModel
from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.methods import METHODS

# the long-context items (2K-7K token documents) have their own, shorter checks in test_rapid
SUITE = [i for i in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl") if i.category != "long-context"]


FLAT_COST = CostModel(sizes=[1, 2, 64, 128], ms=[50.0, 55.0, 120.0, 200.0], context_len=512, model="test",
                      device="cpu", dtype="float32", threads=2)


SHORT = 16  # tokens per registered method and budget: a new method is checked at once, for a few seconds


@pytest.mark.parametrize("method", list(METHODS))
def test_every_registered_method_is_lossless(lm, ar_outputs, method):
    """From the registry: each method at its defaults, a fixed budget of 16 (every offered node verified) and the
    planner's auto budget, on copied code (every source drafts something there)."""
    item = next(i for i in SUITE if i.id == "code-rename")
    for budget in (16, "auto"):
        session = Session(lm, method, budget=budget, cost_model=FLAT_COST).start(item.messages)
        session.run(SHORT)
        assert session.output_ids == ar_outputs[item.id][:len(session.output_ids)], (method, budget)
        assert len(session.output_ids) == SHORT or session.finish_reason == "eos"
        assert session.method.lossless(session.method.param_values, 0.0)


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
