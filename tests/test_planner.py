"""The cost-optimal planner: an empty tree, cost bands measured during a burst of load, and per-source
calibration of the chances it pays for."""

import pytest

from specviz.engine.session import Session
from specviz.tree.draft_tree import DraftTree

REPEAT_PROMPT = "Write the numbers from 1 to 60, separated by commas."


def test_planner_answers_an_empty_tree_as_its_general_path_would():
    """No draft node (a silent source, no budget left): plain decoding, priced from the curve directly."""
    from specviz.engine.costmodel import CostModel
    from specviz.engine.planner import AcceptanceModel, OnlineCost, best_first, plan_tree

    cost = OnlineCost(CostModel(sizes=[1, 2, 8], ms=[10.0, 12.0, 24.0], context_len=512, model="m",
                                device="cpu", dtype="float32", threads=2))
    for _ in range(4):
        cost.observe(1, 12.5)  # the correction moves the one-token cost to 12.5 ms
    empty = plan_tree(DraftTree(1), AcceptanceModel(), cost, 64, draft_ms=0.5)
    kept, cut, curve = empty.kept, empty.cut, empty.expected
    assert kept == [] and cut.kept == cut.offered == 0
    assert cut.expected_tokens_per_s == round(1000 / (0.5 + 12.5), 2)
    assert curve == [0.0]
    # the general path, on a tree whose one node does not pay for its verify cost, decides the same
    tree = DraftTree(1)
    tree.add(0, 5, "logits", prior=0.05)
    chosen = plan_tree(tree, AcceptanceModel(), cost, 64, draft_ms=0.5)
    kept, general = chosen.kept, chosen.cut
    assert kept == [] and general.expected_tokens_per_s == cut.expected_tokens_per_s
    assert best_first(DraftTree(1), AcceptanceModel(), 64)[0] == []


def test_a_cost_band_measured_during_a_burst_expires_and_is_priced_from_the_bands_still_measured():
    from specviz.engine.costmodel import CostModel
    from specviz.engine.planner import STALE_AFTER, OnlineCost

    curve = CostModel(sizes=[1, 2, 8, 32], ms=[10.0, 12.0, 24.0, 40.0], context_len=512, model="m",
                      device="cpu", dtype="float32", threads=2)
    cost = OnlineCost(curve)
    for _ in range(3):  # trees of 8 measured 4x slower than the curve (a burst of load) ...
        cost.observe(8, 96.0)
    for _ in range(3):  # ... one-token steps at the curve's own cost
        cost.observe(1, 10.0)
    assert cost.cost_ms(8) == 96.0 and cost.costs_ms(8)[7] == 96.0
    saved = cost.checkpoint()
    for _ in range(STALE_AFTER - 3):  # the band still counts until STALE_AFTER forwards went by without it
        cost.observe(1, 11.0)
    assert cost.cost_ms(8) == 96.0
    cost.observe(1, 11.0)
    assert cost.cost_ms(8) == 24.0 * 1.1 and cost.costs_ms(8)[7] == 24.0 * 1.1  # the one-token band's correction
    assert cost.cost_ms(32) == 40.0 * 1.1
    cost.rollback(saved)
    assert cost.cost_ms(8) == 96.0 and cost.costs_ms(8)[7] == 96.0 and cost.checkpoint() == saved


def test_the_planner_drafts_again_after_trees_were_measured_during_a_burst(lm):
    """Trees measured 20x dearer than the curve: the planner refuses them, until their bands expire."""
    from specviz.engine.planner import COST_BANDS, STALE_AFTER

    session = Session(lm, "racer")
    cost = session.online_cost
    for band in COST_BANDS:  # one-token steps at the curve's cost, trees at 20x
        for _ in range(3):
            cost.observe(band, (1 if band == 1 else 20) * cost.curve.cost_ms(band))
    # the session's own forwards are observed at the curve's cost, as on a quiet machine: the test is about the bands
    # measured during the burst above, not about this machine's load now (beside two busy loops its one-token steps
    # measured twice the curve, and the 20x trees paid from the first steps)
    observe = cost.observe
    cost.observe = lambda q, ms: observe(q, cost.curve.cost_ms(q))
    session.start(REPEAT_PROMPT)
    session.run(100)
    kept = [len(record.nodes) - 1 for record in session.records]
    # refused while those bands are trusted (the smallest expires first: its samples are the oldest) ...
    assert len(kept) > STALE_AFTER + 2 and not any(kept[:8])
    assert any(kept[STALE_AFTER:])  # ... and tried again once they expired


# ---- per-source calibration of the planner --------------------------------------------------------
def test_calibration_is_per_source_and_stops_paying_for_broken_promises():
    from specviz.engine.costmodel import CostModel
    from specviz.engine.planner import AcceptanceModel, plan_tree

    def tree():
        t = DraftTree(1)
        a = t.add(0, 5, "logits", prior=0.7)
        t.add(a, 6, "logits", prior=0.7)
        r = t.add(0, 7, "retrieval", prior=0.9)
        t.add(r, 8, "retrieval", prior=0.9)
        return t

    # every draft node costs a fifth of a one-token step
    cost = CostModel(sizes=[1, 2, 8], ms=[10.0, 12.0, 24.0], context_len=512, model="m", device="cpu",
                     dtype="float32", threads=2)
    model = AcceptanceModel()
    kept_before = plan_tree(tree(), model, cost, 8).kept
    assert set(kept_before) == {1, 2}  # the logits chain promises most (and takes the root's first share)
    for _ in range(6):  # the logits nodes always fail, the retrieval chain is always accepted
        t = tree()
        model.observe_step(t, model.node_chances(t), ["root", "rejected", "unreached", "accepted", "accepted"])
    assert model.calibration("logits") < 0.5 < 1.0 < model.calibration("retrieval")
    t = tree()
    kept_after = plan_tree(t, model, cost, 8).kept
    assert set(kept_after) == {3, 4} and all(t.sources[n] == {"retrieval"} for n in kept_after)
    saved = model.checkpoint()
    model.observe_step(t, model.node_chances(t), ["root", "accepted", "accepted", "rejected", "unreached"])
    model.rollback(saved)
    assert model.checkpoint() == saved


def test_after_a_step_the_planner_expects_of_the_same_tree_what_it_learnt_from_it(lm):
    """Each planned step records what the planner expected of its verified tree after learning from the step, and
    what the drafters' estimates alone expected of it: where it predicted badly, the lesson moves its expectation
    towards what the target accepted."""
    from specviz.engine.planner import AcceptanceModel
    from specviz.engine.prediction import PredictionError

    session = Session(lm, "unified")
    seen = []  # what the drafters' estimates alone expected of every step's verified tree

    def priced_then_learnt(tree, statuses):
        fresh = AcceptanceModel(control=lm.control_ids)
        seen.append(sum(fresh.calibrated(tree, fresh.node_chances(tree))[1:]))
        learn(tree, statuses)

    session.start(REPEAT_PROMPT)
    learn = session.acceptance.update
    session.acceptance.update = priced_then_learnt
    session.run(40)
    planned = [r for r in session.records if r.plan is not None]
    assert planned and all(r.plan.learnt_accepted is not None for r in planned)
    assert [r.plan.unlearnt_accepted for r in planned] == pytest.approx(seen, abs=1e-3)
    bad = [r for r in planned if abs(r.plan.predicted_accepted - r.num_accepted_drafts) >= 1.0]
    assert bad, "no step was predicted badly: the prompt no longer tests the lesson"
    nearer = [abs(r.plan.learnt_accepted - r.num_accepted_drafts) < abs(r.plan.predicted_accepted
                                                                        - r.num_accepted_drafts) for r in bad]
    assert sum(nearer) >= 0.8 * len(bad)
    error = PredictionError.of(session.records)
    assert error.learnt_mae < error.mae


def test_a_calibrated_chance_is_never_above_its_parents_or_one():
    """A source that delivers more than it promised gets a factor above 1; a node of it must still be no
    likelier than the path to it (and so than 1), or the planner values deep chains it cannot get."""
    from specviz.engine.planner import AcceptanceModel

    t = DraftTree(1)
    a = t.add(0, 5, "retrieval", prior=0.9)
    b = t.add(a, 6, "retrieval", prior=0.95)
    t.add(b, 7, "logits", prior=0.2)
    model = AcceptanceModel()
    for _ in range(20):  # promises 0.9 + 0.855 a step, delivers 2: factor up to CALIBRATION_MAX
        model.observe_step(t, model.node_chances(t), ["root", "accepted", "accepted", "rejected"])
    assert model.calibration("retrieval") > 1.0
    raw = model.node_chances(t)
    calibrated = model.calibrated(t, raw)
    assert raw[a] * model.calibration("retrieval") > 1.0  # uncapped it would pass 1 ...
    assert calibrated[0] == 1.0 and calibrated[a] == 1.0  # ... capped at the root's
    assert all(calibrated[n] <= calibrated[t.parents[n]] for n in range(1, len(t)))
    assert calibrated[b] == min(raw[b] * model.calibration("retrieval"), calibrated[a])


def test_calibrated_siblings_together_are_never_likelier_than_their_parent():
    """Verification takes one child of a node: children scaled up by a factor above 1 share their parent's chance,
    earlier siblings first, so the predicted accepted drafts (their sum) stay an expectation of a real count."""
    from specviz.engine.planner import AcceptanceModel

    t = DraftTree(1)
    firsts = [t.add(0, token, "retrieval", prior=0.45) for token in (5, 6, 7)]
    deeper = [t.add(firsts[0], token, "retrieval", prior=0.6) for token in (8, 9)]
    model = AcceptanceModel()
    for _ in range(20):  # it delivers two drafts where it promises about one: its factor reaches CALIBRATION_MAX
        model.observe_step(t, model.node_chances(t), ["root", "accepted", "rejected", "rejected", "accepted",
                                                      "rejected"])
    raw = model.node_chances(t)
    calibrated = model.calibrated(t, raw)
    factor = model.calibration("retrieval")
    assert factor > 1.0 and sum(raw[n] for n in firsts) * factor > 1.0  # scaled alone they would pass the root
    assert sum(calibrated[n] for n in firsts) == pytest.approx(1.0)
    assert calibrated[firsts[0]] == pytest.approx(min(1.0, raw[firsts[0]] * factor))  # the first sibling first
    assert sum(calibrated[n] for n in deeper) <= calibrated[firsts[0]] + 1e-12
    assert all(c >= 0.0 for c in calibrated)


def test_a_drafted_control_token_is_learnt_apart_from_text_and_starts_unlikely():
    """At a reply's first step the copy-logit row of the template's last token says what the template's turns
    did next (`<|im_start|>` assistant ...), with a probability near 1. A control token (not an end of sequence)
    starts from CONTROL_PRIOR, keyed apart, so the chain is not priced as a likely draft and its failure does
    not teach the planner that confident copy-logit text fails."""
    from specviz.engine.planner import CONTROL_PRIOR, AcceptanceModel, node_key

    control = frozenset({1})
    t = DraftTree(2)
    start = t.add(0, 1, "logits", prior=0.98, bucket="p80")
    t.add(start, 5, "logits", prior=0.99, bucket="p80")
    text = t.add(0, 6, "logits", prior=0.98, bucket="p80")
    plain, aware = AcceptanceModel(), AcceptanceModel(control=control)
    assert plain.node_chances(t)[start] > 0.9
    assert aware.node_chances(t)[start] == pytest.approx(CONTROL_PRIOR)
    assert node_key(t, start, control) != node_key(t, text, control)
    for _ in range(5):  # the control chain always fails: the text's record is untouched by it
        aware.update(t, ["root", "rejected", "unreached", "unreached"])
    assert aware.conditional(node_key(t, start, control), CONTROL_PRIOR) < CONTROL_PRIOR / 2  # it learnt ...
    assert aware.conditional(node_key(t, text, control), 0.98) == pytest.approx(0.95)  # ... apart from the text


def test_a_loaded_models_control_ids_are_its_special_tokens_but_the_ends():
    from types import SimpleNamespace

    from specviz.runtime.loaded_model import LoadedModel

    lm = LoadedModel(model=None, tokenizer=SimpleNamespace(all_special_ids=[0, 1, 2]), name="m", device=None,
                     dtype=None, eos_ids={2})
    assert lm.control_ids == frozenset({0, 1})
    assert LoadedModel(model=None, tokenizer=object(), name="m", device=None, dtype=None).control_ids == frozenset()


def test_a_steps_fixed_overhead_is_priced_and_favours_no_smaller_tree():
    """Theorem 1's denominator is the whole step: a fixed overhead (acceptance, updates, the record) is paid
    whatever is kept, so pricing it never keeps fewer nodes, and the promise counts it."""
    from specviz.engine.costmodel import CostModel
    from specviz.engine.planner import AcceptanceModel, plan_tree

    cost = CostModel(sizes=[1, 2, 8, 32], ms=[10.0, 12.0, 24.0, 40.0], context_len=512, model="m",
                     device="cpu", dtype="float32", threads=2)
    tree = DraftTree(1)
    parent = 0
    for token, prior in zip(range(5, 13), (0.9, 0.8, 0.6, 0.5, 0.4, 0.35, 0.3, 0.25)):
        parent = tree.add(parent, token, "retrieval", prior=prior)
    without = plan_tree(tree, AcceptanceModel(), cost, 64, draft_ms=1.0)
    with_overhead = plan_tree(tree, AcceptanceModel(), cost, 64, draft_ms=1.0, overhead_ms=6.0)
    assert len(with_overhead.kept) >= len(without.kept)
    k = with_overhead.cut.kept
    assert with_overhead.cut.overhead_ms == 6.0 and with_overhead.cut.fixed_ms == 7.0
    assert with_overhead.cut.expected_tokens_per_s == round(
        1000 * (1 + with_overhead.expected[k]) / (7.0 + with_overhead.verify_ms[k]), 2)
