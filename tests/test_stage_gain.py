"""unified's gated model stage (drafters.stage_gain): what the stage added on the steps it ran, against the run's
rate without it; a stage that adds nothing is explored as rarely as its price says; loads; rollback; the warm-up."""

import pytest

from specviz.drafters import stage_gain
from specviz.drafters.measured_choice import EXPLORE_SHARE
from specviz.drafters.stage_gain import ADDS, WITHOUT, StageGain, stage_added
from specviz.engine.session import Session
from specviz.tree.draft_tree import DraftTree

OWN = frozenset({"model", "deepen"})


def _tree() -> tuple[DraftTree, dict[str, int]]:
    """root -> a (retrieval and model) -> b (model) -> c (deepen, seeded below the model's branch);
    root -> x (retrieval) -> y (retrieval)."""
    tree = DraftTree(0)
    nodes = {"a": tree.add(0, 1, "retrieval")}
    tree.add(0, 1, "model")
    nodes["b"] = tree.add(nodes["a"], 2, "model")
    nodes["c"] = tree.add(nodes["b"], 3, "deepen")
    nodes["x"] = tree.add(0, 7, "retrieval")
    nodes["y"] = tree.add(nodes["x"], 8, "retrieval")
    return tree, nodes


def test_what_the_stage_added_starts_at_the_first_accepted_node_only_it_offered():
    tree, n = _tree()
    # a is shared: retrieval alone would have got it, so only b and c (below it) are the stage's
    assert stage_added(tree, [n["a"], n["b"], n["c"]], OWN) == (2, 2)
    assert stage_added(tree, [n["a"]], OWN) == (0, 2)          # the step ended on a node retrieval offered too
    assert stage_added(tree, [n["x"], n["y"]], OWN) == (0, 2)  # the other sources' branch won
    assert stage_added(tree, [], OWN) == (0, 2)
    # deepening counted as the stage's only when it says so
    assert stage_added(tree, [n["a"], n["b"], n["c"]], frozenset({"model"})) == (2, 1)


def _gate(setting: str) -> StageGain:
    return StageGain("auto", setting, explore_every=30)


def test_a_stage_that_adds_less_per_ms_than_the_run_makes_is_off_and_explored_at_its_price():
    gate = _gate("test-gain-costly")
    assert gate.choose() == "on"   # untried: its first tries
    for _ in range(2):             # each try: 20 ms of drafting for 0.2 tokens; the run makes 2 tokens in 25 ms
        gate.observe(True, 2, 45.0, added=0.2, stage_ms=20.0)
    assert gate.stage_rate() == pytest.approx(0.2 / 20.0) and gate.run_rate() == pytest.approx(1.8 / 25.0)
    lost_ms = 20.0 - 0.2 / gate.run_rate()
    interval = round(lost_ms / (EXPLORE_SHARE * 25.0))
    assert gate.explore_interval() == interval > 30
    picks = [gate.choose() for _ in range(interval)]
    assert picks[:-1] == ["off"] * (interval - 1) and picks[-1] == "on"
    report = gate.report()
    assert report.tokens_per_s == {ADDS: 10.0, WITHOUT: 72.0} and report.explore_every == interval


def test_a_stage_that_adds_more_per_ms_than_the_run_makes_stays_on():
    gate = _gate("test-gain-pays")
    for _ in range(3):  # 1.5 tokens for 10 ms of its own, where the run makes 1 token in 25 ms
        gate.observe(True, 3, 35.0, added=1.5, stage_ms=10.0)
        gate.observe(False, 1, 25.0)
    assert [gate.choose() for _ in range(50)] == ["on"] * 50
    assert gate.report().explore_every is None


def test_a_run_of_text_the_other_sources_copy_turns_a_stage_off_that_another_text_turned_on():
    """The gains are the process's (shared by sessions), the run's rate is the session's: a stage that paid while
    the model wrote anew stops paying once the run copies at 4 tokens a step."""
    writing = _gate("test-gain-shift")
    for _ in range(4):
        writing.observe(True, 2, 30.0, added=1, stage_ms=8.0)
    assert writing.choose() == "on"
    copying = _gate("test-gain-shift")
    for _ in range(8):
        copying.observe(False, 5, 22.0)
    assert copying.choose() == "off"


def test_a_step_during_a_burst_of_load_counts_at_the_calibrated_speed():
    """The stage's tries ran during a burst that made everything 4x slow (1 token for 40 ms of its own: 10 at the
    calibrated speed); the run's steps since, at no load, make 1 token in 25 ms. Divided by the load the stage pays;
    raw times would condemn it."""
    aware, unaware = _gate("test-gain-burst"), _gate("test-gain-burst-raw")
    for _ in range(2):
        aware.observe(True, 2, 4 * 35.0, added=1, stage_ms=40.0, load=4.0)
        unaware.observe(True, 2, 4 * 35.0, added=1, stage_ms=40.0)
    for _ in range(8):
        for gate in (aware, unaware):
            gate.observe(False, 1, 25.0)
    assert aware.stage_rate() == pytest.approx(1 / 10.0)
    assert aware.choose() == "on"
    assert unaware.choose() == "off"


def test_rollback_restores_the_shared_gains_and_the_count():
    gate = _gate("test-gain-rollback")
    for _ in range(2):
        gate.observe(True, 2, 45.0, added=0, stage_ms=20.0)
    saved = gate.checkpoint()
    gate.choose()
    gate.observe(True, 5, 45.0, added=3, stage_ms=20.0)
    gate.rollback(saved)
    assert stage_gain._since_explore[gate.key] == saved[0]
    assert list(gate.gains) == saved[1] and list(gate.recent) == saved[2]


def test_a_benchmarks_warm_up_takes_the_first_tries_of_the_model_stage(lm, prefix_ids, monkeypatch):
    """The first tries of unified's model stage are shared by the process's later sessions of the setting: the
    untimed warm-up of bench and sweep takes them, so they slow no measured prompt or sweep point."""
    from specviz.engine.run import warm_up

    for name in ("_gains", "_since_explore", "_recent"):
        monkeypatch.setattr(stage_gain, name, {})
    gate = Session(lm, "unified").start_ids(prefix_ids).method.stages[0].gate
    assert len(gate.gains) == 0
    warm_up(lm, "unified", prompt_ids=prefix_ids)
    assert len(gate.gains) >= gate.first_tries
