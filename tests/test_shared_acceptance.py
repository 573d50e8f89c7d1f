"""The planner's acceptance record: calibrated per source set, and carried from session to session of one setting
(engine.shared_acceptance)."""

from specviz.engine import shared_acceptance
from specviz.engine.planner import AcceptanceModel
from specviz.engine.session import Session
from specviz.tree.draft_tree import DraftTree


def _agreeing_tree() -> DraftTree:
    """A node retrieval and search agree on, and a node search offers alone."""
    t = DraftTree(1)
    t.add(0, 5, "retrieval", prior=0.3)
    t.add(0, 5, "search", prior=0.3)
    t.add(0, 6, "search", prior=0.3)
    return t


def test_a_node_two_sources_agree_on_is_calibrated_by_what_such_nodes_delivered():
    """Agreed nodes are accepted far more often than either source's own: their chances are scaled by their own
    record, not dragged down by the lone source's misses."""
    model = AcceptanceModel()
    for _ in range(8):  # the agreed node always accepted, the lone search node never
        t = _agreeing_tree()
        model.observe_step(t, model.node_chances(t), ["root", "accepted", "rejected"])
    assert model.calibration("retrieval+search") > 1.0 > 0.5 > model.calibration("search")
    t = _agreeing_tree()
    raw = model.node_chances(t)
    calibrated = model.calibrated(t, raw)
    assert calibrated[1] == min(1.0, raw[1] * model.calibration("retrieval+search")) > raw[1]
    assert calibrated[2] == raw[2] * model.calibration("search") < raw[2]


def test_the_store_hands_a_copy_of_the_latest_record_of_the_same_setting_and_a_fresh_one_otherwise():
    shared_acceptance.forget()
    model = AcceptanceModel()
    t = _agreeing_tree()
    model.update(t, ["root", "accepted", "rejected"])
    model.observe_step(t, model.node_chances(t), ["root", "accepted", "rejected"])
    shared_acceptance.publish("a", model)
    carried = shared_acceptance.starting_model("a")
    assert carried.checkpoint() == model.checkpoint()
    carried.update(t, ["root", "rejected", "rejected"])  # the carried record is the new session's own
    assert carried.checkpoint() != model.checkpoint() == shared_acceptance.starting_model("a").checkpoint()
    assert shared_acceptance.starting_model("b").checkpoint() == AcceptanceModel().checkpoint()
    for n in range(shared_acceptance.MAX_SETTINGS):  # the settings least recently published are dropped first
        shared_acceptance.publish(f"other {n}", model)
    assert shared_acceptance.starting_model("a").checkpoint() == AcceptanceModel().checkpoint()
    shared_acceptance.forget()


def test_a_session_starts_from_the_latest_session_of_its_setting(lm):
    """The second run of a setting predicts its first step from what the first run learnt; a run with another
    parameter starts from the prior. The tokens are the same either way (greedy)."""
    shared_acceptance.forget()
    prompt = "List the days of the week, then list them again."
    first = Session(lm, "racer").start(prompt)
    for _ in range(6):
        first.step()
    learnt = first.acceptance.checkpoint()
    assert learnt[1], "six racer steps compared no draft node"
    second = Session(lm, "racer").start(prompt)
    assert second.acceptance.checkpoint() == learnt
    other = Session(lm, "racer", params={"max_breadth": 2}).start(prompt)
    assert other.acceptance_setting != second.acceptance_setting
    assert other.acceptance.checkpoint() == AcceptanceModel().checkpoint()
    for _ in range(6):
        second.step()
    assert second.output_ids[:len(first.output_ids)] == first.output_ids
    shared_acceptance.forget()


def test_bench_starts_every_repeat_of_a_prompt_from_the_records_the_earlier_prompts_left(lm, monkeypatch):
    """A repeat that started from an earlier repeat's record of the same text would read faster than a new prompt
    does; the first prompt starts from the prior, though the warm-up stepped through it."""
    from specviz.benches.suite_bench import run_bench
    from specviz.studies.suite import SuiteItem

    started: list[tuple[str, tuple]] = []
    starting_model = shared_acceptance.starting_model

    def recorded(setting):
        model = starting_model(setting)
        started.append((setting, model.checkpoint()))
        return model

    monkeypatch.setattr(shared_acceptance, "starting_model", recorded)
    suite = [SuiteItem("days", "test", "List the days of the week, then list them again."),
             SuiteItem("months", "test", "List the months of the year, then list them again.")]
    run_bench(lm, suite, ["ar", "racer"], max_new_tokens=24, repeats=2)
    racer = [record for setting, record in started if "|racer|" in setting]
    assert len(racer) == 1 + 2 * 2  # the warm-up, then two repeats of two prompts
    fresh = AcceptanceModel().checkpoint()
    assert racer[1] == racer[2] == fresh  # the first prompt: the prior, both repeats
    assert racer[3] == racer[4] != fresh  # the second: what the first prompt taught, both repeats
