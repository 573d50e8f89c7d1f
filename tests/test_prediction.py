"""The planner's predicted speedup beside the measured one (no model): the arithmetic and its three factors."""

import pytest

from specviz.engine.prediction import ar_ms_per_token, speedup_check
from specviz.records.plan import BudgetCut, PlanDecision
from specviz.records.status import NodeStatus
from specviz.records.step import NodeRecord, StepRecord


def step(kept, expected, draft_ms, verify_ms, committed, total_ms, plan=True):
    root = NodeRecord(id=0, parent=-1, depth=0, token_id=1, text="a", sources=[], status=NodeStatus.ROOT)
    decision = PlanDecision(predicted_accepted=expected, expected_curve=None, verify_ms=verify_ms,
                            cut=BudgetCut(offered=8, kept=kept, expected_accepted=expected, draft_ms=draft_ms,
                                          expected_tokens_per_s=0.0)) if plan else None
    return StepRecord(step=0, prefix_len=3, budget=8, budget_mode="auto", nodes=[root],
                      accepted_tokens=list(range(committed)), accepted_origins=["bonus"] * committed, allocation={},
                      timings_ms={"total": total_ms}, plan=decision)


def test_predicted_and_measured_speedup_and_the_factors_of_their_gap():
    records = [step(4, 2.0, 1.0, [10.0, 11, 11, 12, 14.0], 4, 20.0), step(2, 1.0, 1.0, [10.0, 11, 13.0], 1, 16.0)]
    c = speedup_check(records, ar_ms_per_token=12.0)
    # expected 3 + 2 tokens in (1 + 14) + (1 + 13) ms against ar's 10 ms: 5 / 29 * 10
    assert c.predicted == pytest.approx(5 / 29 * 10) and c.steps == 2
    assert c.measured == pytest.approx(5 / 36 * 12)
    assert c.accepted_factor == 1.0 and c.time_factor == pytest.approx(36 / 29) and c.ar_factor == pytest.approx(1.2)
    assert c.measured / c.predicted == pytest.approx(c.accepted_factor * c.ar_factor / c.time_factor)
    unplanned = speedup_check([step(0, 0, 0, None, 1, 10.0, plan=False)], ar_ms_per_token=None)
    assert unplanned.predicted is None and unplanned.measured is None and unplanned.tokens == 1


def test_ar_ms_per_token():
    assert ar_ms_per_token([step(0, 0, 0, None, 1, 10.0, plan=False), step(0, 0, 0, None, 1, 14.0, plan=False)]) == 12.0
    assert ar_ms_per_token([]) is None
