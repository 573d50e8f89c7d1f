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


def planned_tree(chances_by_node, accepted):
    """A verified tree of (parent, depth, chance) nodes under the root, `accepted` drafts committed."""
    nodes = [NodeRecord(id=0, parent=-1, depth=0, token_id=1, text="a", sources=[], status=NodeStatus.ROOT)]
    for i, (parent, depth, chance) in enumerate(chances_by_node, start=1):
        nodes.append(NodeRecord(id=i, parent=parent, depth=depth, token_id=i + 1, text="b", sources=["logits"],
                                status=NodeStatus.REJECTED, chance=chance))
    predicted = sum(c for _, _, c in chances_by_node)
    return StepRecord(step=0, prefix_len=3, budget=8, budget_mode="auto", nodes=nodes,
                      accepted_tokens=list(range(accepted + 1)), accepted_origins=["bonus"] * (accepted + 1),
                      allocation={}, timings_ms={"total": 10.0},
                      plan=PlanDecision(predicted_accepted=predicted, expected_curve=None))


def test_the_error_a_planner_with_exact_chances_expects_and_its_bias():
    from specviz.engine.prediction import PredictionError, accepted_at_least, own_spread

    # two siblings at depth 1 (0.5 + 0.3 of one path accepted), one child at depth 2
    tree = planned_tree([(0, 1, 0.5), (0, 1, 0.3), (1, 2, 0.2)], accepted=2)
    assert accepted_at_least(tree) == pytest.approx([0.8, 0.2])
    # X: 0 with 0.2, 1 with 0.6, 2 with 0.2; mean 1.0, so E|X - 1| = 0.4
    assert own_spread(accepted_at_least(tree)) == pytest.approx(0.4)
    # a calibration factor above 1 pushed siblings past 1: the tail is clamped, never above 1 or growing
    assert accepted_at_least(planned_tree([(0, 1, 0.7), (0, 1, 0.6), (1, 2, 0.9)], 0)) == pytest.approx([1.0, 0.9])
    certain = planned_tree([(0, 1, 1.0), (1, 2, 1.0)], accepted=2)
    assert own_spread(accepted_at_least(certain)) == 0.0
    error = PredictionError.of([tree, certain, step(0, 0, 0, None, 1, 10.0, plan=False)])
    assert error.steps == 2 and error.mae == pytest.approx(0.5) and error.bias == pytest.approx(-0.5)
    assert error.spread == pytest.approx(0.2)
    assert PredictionError.of([step(0, 0, 0, None, 1, 10.0, plan=False)]) is None


def test_the_chances_are_set_beside_what_the_target_accepted_per_source_set_and_band():
    from specviz.engine.prediction import ChanceBand, chance_reliability

    def node(i, sources, chance, status):
        return NodeRecord(id=i, parent=0, depth=1, token_id=i + 1, text="b", sources=sources, status=status,
                          chance=chance)

    root = NodeRecord(id=0, parent=-1, depth=0, token_id=1, text="a", sources=[], status=NodeStatus.ROOT)
    nodes = [root, node(1, ["search", "retrieval"], 0.3, NodeStatus.ACCEPTED),
             node(2, ["retrieval", "search"], 0.4, NodeStatus.REJECTED), node(3, ["search"], 0.3, NodeStatus.REJECTED),
             node(4, ["search"], 0.9, NodeStatus.UNREACHED), node(5, ["search"], None, NodeStatus.ACCEPTED)]
    record = StepRecord(step=0, prefix_len=3, budget=8, budget_mode="auto", nodes=nodes, accepted_tokens=[1, 2],
                        accepted_origins=["bonus"] * 2, allocation={}, timings_ms={"total": 10.0})
    assert chance_reliability([record]) == [ChanceBand("retrieval+search", 0.25, 2, 0.35, 0.5),
                                            ChanceBand("search", 0.25, 1, 0.3, 0.0),
                                            ChanceBand("search", 0.75, 1, 0.9, 0.0)]


def test_the_errors_after_each_steps_lesson_and_never_learnt_are_set_beside_the_prediction():
    from dataclasses import replace

    from specviz.engine.prediction import PredictionError
    from specviz.render.step_panels import prediction_figure

    missed = planned_tree([(0, 1, 0.8), (1, 2, 0.7)], accepted=0)   # predicted 1.5, got nothing
    missed.plan = replace(missed.plan, learnt_accepted=0.5, unlearnt_accepted=1.0)
    hit = planned_tree([(0, 1, 0.5)], accepted=1)                     # predicted 0.5, got 1
    hit.plan = replace(hit.plan, learnt_accepted=0.75, unlearnt_accepted=0.5)
    error = PredictionError.of([missed, hit])
    assert error.mae == pytest.approx((1.5 + 0.5) / 2)
    assert error.learnt_mae == pytest.approx((0.5 + 0.25) / 2) and error.unlearnt_mae == pytest.approx(0.75)
    figure = prediction_figure([missed, hit])
    assert [trace.name for trace in figure.data] == ["predicted E(T) - 1", "measured", "after learning from the step"]
    assert list(figure.data[2].y) == [0.5, 0.75]
    assert "after learning from their step: 0.38; never learnt: 0.75" in figure.layout.title.text
    # a trace recorded before they were kept: no such error, no such series, the rest as before
    old = planned_tree([(0, 1, 0.5)], accepted=1)
    assert PredictionError.of([missed, old]).learnt_mae is None
    assert [trace.name for trace in prediction_figure([old]).data] == ["predicted E(T) - 1", "measured"]
    assert "never learnt" not in prediction_figure([old]).layout.title.text
