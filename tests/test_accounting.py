"""Run accounting from hand-made step records: exact counts, figure values, empty states (no model)."""

import pytest

from specviz.records.plan import SourceShare
from specviz.records.status import NodeStatus
from specviz.records.step import NodeRecord, StepRecord
from specviz.render import accounting_figures
from specviz.render.accounting_figures import Lane

ROOT, ACCEPTED, RELAXED, TRANSFERRED, REJECTED = (NodeStatus.ROOT, NodeStatus.ACCEPTED, NodeStatus.RELAXED,
                                                  NodeStatus.TRANSFERRED, NodeStatus.REJECTED)


def make_record(step, nodes, committed, origins, allocation, timings, split=None):
    """A step record from (parent, sources, status[, mark]) per draft node; the root is added as node 0
    and depths follow the parents."""
    records = [NodeRecord(id=0, parent=-1, depth=0, token_id=100, text="<root>", sources=[], status=ROOT)]
    for i, (parent, node_sources, status, *mark) in enumerate(nodes, start=1):
        records.append(NodeRecord(id=i, parent=parent, depth=records[parent].depth + 1, token_id=100 + i,
                                  text=f"t{i}", sources=node_sources, status=status, target_prob=0.5,
                                  target_rank=0, mark=mark[0] if mark else None))
    return StepRecord(step=step, prefix_len=10 + step, budget=len(nodes), budget_mode="fixed", nodes=records,
                      accepted_tokens=list(range(committed)), accepted_origins=origins, allocation=allocation,
                      timings_ms=timings, split=split)


def timings(draft, verify, forward, update):
    return {"draft": draft, "verify": verify, "forward": forward, "update": update,
            "total": draft + verify + update}


@pytest.fixture
def records():
    # step 0: 3 retrieval nodes (2 accepted), node 1 shared by logits + retrieval, 2 more logits nodes
    step0 = make_record(
        0, [(0, ["logits", "retrieval"], ACCEPTED),     # 1, depth 1
            (1, ["retrieval"], ACCEPTED),               # 2, depth 2
            (1, ["retrieval"], REJECTED),               # 3, depth 2
            (0, ["logits"], REJECTED),                  # 4, depth 1
            (2, ["logits"], REJECTED)],                 # 5, depth 3
        committed=3, origins=["logits+retrieval", "retrieval", "bonus"], allocation={"logits": 3, "retrieval": 3},
        timings=timings(2.0, 10.0, 8.0, 1.0),
        split={"logits": SourceShare(offered=5, proposed=3, shared=0),
               "retrieval": SourceShare(offered=2, proposed=3, shared=1)})
    # step 1: no split recorded: proposed falls back to the allocation; relaxed and transferred count as accepted
    step1 = make_record(
        1, [(0, ["model"], RELAXED), (1, ["model"], ACCEPTED, TRANSFERRED), (0, ["model"], REJECTED)],
        committed=3, origins=["model~relaxed", "model~transferred", "bonus"], allocation={"model": 3},
        timings=timings(1.0, 6.0, 5.0, 0.5))
    # step 2: plain decoding, root only
    step2 = make_record(2, [], committed=1, origins=["bonus"], allocation={}, timings=timings(0.0, 4.0, 4.0, 0.5))
    return [step0, step1, step2]


def test_run_accounting_counts(records):
    numbers = accounting_figures.run_accounting(records)
    assert numbers["steps"] == 3
    assert numbers["tokens"] == 7
    assert numbers["verified"] == 8
    assert numbers["accepted_drafts"] == 4
    assert numbers["sources"] == {
        "logits": {"proposed": 3, "verified": 3, "accepted": 1, "rate": pytest.approx(1 / 3)},
        "retrieval": {"proposed": 3, "verified": 3, "accepted": 2, "rate": pytest.approx(2 / 3)},
        "model": {"proposed": 3, "verified": 3, "accepted": 2, "rate": pytest.approx(2 / 3)}}
    assert list(numbers["sources"]) == ["logits", "retrieval", "model"]  # the registry's order
    assert numbers["by_source"] == pytest.approx({"logits": 1 / 3, "retrieval": 2 / 3, "model": 2 / 3})
    assert numbers["by_depth"] == {1: (2, 4), 2: (2, 3), 3: (0, 1)}
    assert numbers["verified_per_step"] == [5, 3, 0]
    assert numbers["accepted_per_step"] == [2, 2, 0]
    assert numbers["wasted_per_step"] == [3, 1, 0]
    assert numbers["wasted"] == 4
    assert numbers["wasted_share"] == pytest.approx(0.5)
    assert numbers["time_ms"] == pytest.approx({"draft": 3.0, "forward": 17.0, "accept": 3.0, "update": 2.0,
                                                "total": 25.0})


def test_accounting_survives_a_trace_round_trip(records):
    replayed = [StepRecord.from_dict(r.to_dict()) for r in records]
    assert replayed == records
    assert accounting_figures.run_accounting(replayed) == accounting_figures.run_accounting(records)


def test_empty_accounting():
    numbers = accounting_figures.run_accounting([])
    assert numbers["steps"] == numbers["tokens"] == numbers["verified"] == numbers["wasted"] == 0
    assert numbers["sources"] == {} and numbers["by_depth"] == {} and numbers["wasted_share"] == 0.0


def test_sources_figure(records):
    figure = accounting_figures.sources_figure(records)
    bars = {t.name: t for t in figure.data}
    assert list(bars) == ["proposed", "verified", "accepted"]
    assert list(bars["accepted"].x) == ["logits", "retrieval", "model"]
    assert list(bars["proposed"].y) == [3, 3, 3]
    assert list(bars["verified"].y) == [3, 3, 3]
    assert list(bars["accepted"].y) == [1, 2, 2]
    assert figure.layout.barmode == "group"


def test_acceptance_figure(records):
    figure = accounting_figures.acceptance_figure(records)
    by_depth, by_source = figure.data
    assert list(by_depth.x) == [1, 2, 3]
    assert list(by_depth.y) == pytest.approx([0.5, 2 / 3, 0.0])
    assert list(by_depth.text) == ["2/4", "2/3", "0/1"]
    assert list(by_source.x) == ["logits", "retrieval", "model"]
    assert list(by_source.y) == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    assert "4 of 8" in figure.layout.title.text


def test_waste_figure(records):
    figure = accounting_figures.waste_figure(records)
    accepted, wasted = figure.data
    assert list(accepted.y) == [2, 2, 0]
    assert list(wasted.y) == [3, 1, 0]
    assert [a + w for a, w in zip(accepted.y, wasted.y)] == [5, 3, 0]
    assert "4 of 8" in figure.layout.title.text and "50%" in figure.layout.title.text


def test_time_split_figure(records):
    figure = accounting_figures.time_split_figure(records)
    parts = {t.name: list(t.y) for t in figure.data}
    assert parts == {"draft": [2.0, 1.0, 0.0], "verify forward": [8.0, 5.0, 4.0],
                     "accept (verify - forward)": [2.0, 1.0, 0.0], "update": [1.0, 0.5, 0.5]}
    for step, record in enumerate(records):  # the four parts stack up to the step's total
        assert sum(p[step] for p in parts.values()) == pytest.approx(record.timings_ms.total)
    assert figure.layout.barmode == "stack"
    assert "25 ms" in figure.layout.title.text and "forward 17 ms (68%)" in figure.layout.title.text


def test_lanes_figure(records):
    plain = [make_record(i, [], committed=1, origins=["bonus"], allocation={}, timings=timings(0.0, 4.0, 4.0, 0.0))
             for i in range(7)]
    figure = accounting_figures.lanes_figure([Lane("tree", 10.0, records), Lane("plain", 10.0, plain)])
    prefill0, steps0, prefill1, steps1 = figure.data
    assert list(prefill0.x) == [10.0] and list(prefill0.base) == [0.0]
    assert list(steps0.text) == ["3", "3", "1"]
    for prefill, steps, lane_total in ((prefill0, steps0, 25.0), (prefill1, steps1, 28.0)):
        starts, widths = list(steps.base), list(steps.x)
        assert starts[0] == pytest.approx(prefill.x[0])
        for k in range(len(starts) - 1):  # contiguous segments
            assert starts[k] + widths[k] == pytest.approx(starts[k + 1])
        assert sum(widths) == pytest.approx(lane_total)
        assert starts[-1] + widths[-1] == pytest.approx(10.0 + lane_total)
    assert list(figure.layout.yaxis.ticktext) == ["tree", "plain"]
    ends = [a.text for a in figure.layout.annotations]
    assert "7 tokens · 35 ms" in ends[0] and "7 tokens · 38 ms" in ends[1]
    assert f"{38 / 35:.2f}×" in figure.layout.title.text
    assert f"{28 / 25:.2f}×" in figure.layout.title.text  # decoding alone


def test_cost_figure():
    curve = {"sizes": [1, 2, 4, 8], "ms": [10.0, 11.0, 12.0, 16.0]}
    expected = [0.0, 0.8, 1.3, 1.6, 1.8, 1.9, 1.95, 2.0, 2.0, 2.0]
    figure = accounting_figures.cost_figure(curve, expected, chosen=2, draft_ms=2.0)
    interpolated, measured, speedup = figure.data[:3]
    assert list(measured.x) == [1, 2, 4, 8] and list(measured.y) == [10.0, 11.0, 12.0, 16.0]
    assert list(interpolated.y[:4]) == pytest.approx([10.0, 11.0, 11.5, 12.0])
    assert interpolated.y[9] == pytest.approx(18.0)  # 10 tokens: the last slope (1 ms per token) past 8
    assert speedup.y[0] == pytest.approx(10.0 / (2.0 + 10.0))  # k = 0: cost(1) / (draft_ms + cost(1))
    assert speedup.y[3] == pytest.approx(2.6 / (2.0 + 12.0) * 10.0)
    assert speedup.y[9] == pytest.approx(3.0 / (2.0 + 18.0) * 10.0)
    chosen = figure.data[3]
    assert list(chosen.x) == [2] and chosen.y[0] == pytest.approx(2.3 / 13.5 * 10.0)
    assert "chosen k = 2" in figure.layout.title.text
    best = max(range(len(expected)), key=lambda k: speedup.y[k])
    assert f"best k = {best}" in figure.layout.title.text


def test_cost_figure_without_draft_time_or_choice():
    figure = accounting_figures.cost_figure({"sizes": [1, 16], "ms": [5.0, 6.0]}, [0.0, 1.0], None)
    assert figure.data[2].y[0] == pytest.approx(1.0)
    assert figure.data[2].y[1] == pytest.approx(2.0 / (5.0 + 1.0 / 15) * 5.0)
    assert "chosen" not in figure.layout.title.text


def test_empty_states_do_not_crash():
    figures = [accounting_figures.sources_figure([]), accounting_figures.acceptance_figure([]), accounting_figures.waste_figure([]),
               accounting_figures.time_split_figure([]), accounting_figures.lanes_figure([]),
               accounting_figures.lanes_figure([Lane("tree", 0.0, []), Lane("plain", 0.0, [])]),
               accounting_figures.lanes_figure([Lane("tree", 12.0, [])]),
               accounting_figures.cost_figure(None, None, None), accounting_figures.cost_figure(None, [0.0, 1.0], 1),
               accounting_figures.cost_figure({"sizes": [1, 4], "ms": [5.0, 7.0]}, None, None)]
    for figure in figures:
        assert figure.layout.title.text
        figure.to_json()
    plain_only = [make_record(0, [], committed=1, origins=["bonus"], allocation={}, timings=timings(0, 4, 4, 0))]
    for make in (accounting_figures.sources_figure, accounting_figures.acceptance_figure, accounting_figures.waste_figure,
                 accounting_figures.time_split_figure):
        assert make(plain_only).layout.title.text
