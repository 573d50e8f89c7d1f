"""What the engine records of the offered tree (real model): with budget=auto every step holds the nodes the
sources offered and the planner cut, in one id space with the verified ones, with their chances; the trace
carries their texts and loads back equal. And the speedup's ar baseline: stepped between the run's steps."""

import pytest

from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.records.offered import NOT_RANKED
from specviz.records.trace import Trace
from specviz.lab.lab import Lab
from specviz.render.session_view import live_counters, live_counters_markdown

CODE = next(item for item in load_suite("assets/suite.jsonl") if item.id == "code-rename")


def test_each_auto_step_records_what_the_planner_cut(lm, tmp_path):
    session = Session(lm, "unified").start(CODE.messages)
    session.run(24)
    cut_steps = [r for r in session.records if r.cut_nodes]
    assert cut_steps, "the planner cut nothing in 24 tokens of copied code"
    for record in session.records:
        cut, plan = record.cut_nodes, record.plan
        verified = len(record.nodes)
        assert plan.cut.offered == verified - 1 + (len(cut) if cut else 0)   # the offered tree is whole
        assert plan.cut.kept == verified - 1
        assert plan.verify_ms and len(plan.verify_ms) == len(plan.expected_curve)
        assert all(n.chance is not None and 0 <= n.chance <= 1 for n in record.nodes[1:])
        if not cut:
            continue
        for i, (parent, rank) in enumerate(zip(cut.parents, cut.ranks)):
            assert 0 <= parent < verified + i                                  # a parent comes first
            assert rank == NOT_RANKED or rank >= plan.cut.kept                 # cut: below the kept prefix
            assert 0 <= cut.chances[i] <= 1 and cut.sources[i]
        # siblings never repeat a token: the verified and cut children of a node are one trie level
        children = {}
        for n in record.nodes[1:]:
            children.setdefault(n.parent, []).append(n.token_id)
        for parent, token in zip(cut.parents, cut.tokens):
            children.setdefault(parent, []).append(token)
        assert all(len(tokens) == len(set(tokens)) for tokens in children.values())
    trace = session.trace()
    assert all(str(t) in trace.token_texts for r in cut_steps for t in r.cut_nodes.tokens)
    trace.save(tmp_path / "t.json")
    assert Trace.load(tmp_path / "t.json") == trace


def test_ar_is_stepped_between_the_runs_steps(lm):
    lab = Lab()
    lab.choose_values(model="", prompt="Repeat exactly: one two three four, one two three four, one two three four.",
              method="racer", budget="auto", params={})
    for _ in range(3):
        lab.step(24)
        assert len(lab.state.paired.ar.output_ids) == len(lab.session.output_ids)  # caught up after every step
    for _ in lab.run(24):
        pass
    baseline = lab.on_screen().live.baseline
    assert baseline is not None and baseline.output_ids == lab.session.output_ids  # greedy: the same tokens
    assert len(baseline.records) == len(lab.session.output_ids)                    # ar: one token a step
    versus = live_counters(lab.on_screen().live).versus_ar
    assert versus.paired and versus.identical
    # and the counters line says so (render.counters.counters_markdown renders the typed counters)
    assert "stepped between this run's steps" in live_counters_markdown(lab.on_screen().live)


def test_ar_stepping_first_runs_at_most_lead_tokens_ahead_and_is_cut_to_the_runs_length(lm):
    """After an update of a Run that ar takes the brunt of, ar steps before the run for LEAD_MS
    (engine.paired_baseline): at most LEAD_TOKENS ahead and within the call's limit, and what the page compares is
    ar's first tokens, as many as the run has."""
    from specviz.engine.paired_baseline import LEAD_TOKENS, PairedBaseline

    # a fixed budget (at most 5 tokens a step) and an answer of some 40 tokens: with budget=auto the trees follow the
    # machine's timings, and beside a busy neighbour one step reached EOS before ar could lead it
    run = Session(lm, "racer", budget=4).start("Count from one to twenty in words, separated by commas.")
    paired = PairedBaseline(run)
    for turn in range(4):
        if turn % 2:
            paired.lead(24, for_ms=1e9)  # as long as it may: the token cap stops it
            assert len(paired.ar.output_ids) == min(len(run.output_ids) + LEAD_TOKENS, 24)
            paired.lead(24, for_ms=0.0)  # no time: no step
            assert len(paired.ar.output_ids) == min(len(run.output_ids) + LEAD_TOKENS, 24)
        run.step(24)
        paired.keep_up()
        result = paired.result()
        assert result.output_ids == run.output_ids  # greedy: the same tokens, cut to the run's length
        assert len(result.records) == result.steps == len(run.output_ids)
        assert result.decode_s == pytest.approx(sum(r.timings_ms.total for r in result.records) / 1000, rel=1e-3)


def test_the_brunt_of_each_update_goes_to_each_side_in_proportion_to_its_step_time(lm):
    """A side's share of the updates after which it stepped first follows its share of the two runs' step time
    (engine.paired_baseline.brunt_to_ar): taken in turns, a run several times faster than ar took half the browser's
    drawing where a steady load would have given it a quarter."""
    from dataclasses import replace

    from specviz.engine.paired_baseline import PairedBaseline
    from specviz.records.step import StepTimings

    run = Session(lm, "racer", budget=4).start("Count from one to twenty in words, separated by commas.")
    paired = PairedBaseline(run)
    run.step(24)
    paired.keep_up()
    # the timings as a browser-free machine might give them: ar's steps 3.5 times the run's in all (share 7/9)
    run_ms = sum(r.timings_ms.total for r in run.records)
    each = 3.5 * run_ms / len(paired.ar.records)
    paired.ar.records[:] = [replace(r, timings_ms=StepTimings(verify=each, forward=each, total=each))
                            for r in paired.ar.records]
    to_ar = [paired.brunt_to_ar() for _ in range(45)]
    assert to_ar[:5] == [True, True, True, True, False]
    assert abs(sum(to_ar) - 35) <= 1  # 7/9 of 45 (a float at a whole boundary may tip one)
@pytest.mark.parametrize("method", ["unified", "rapid"])
def test_the_paired_ar_shares_the_runs_prefill_and_emits_what_its_own_would(lm, method):
    """Issue 70: the paired ar prefilled after the run's first step, under another moment's load than the run's own
    prefill (a browser drawing the Run's click), which read 0.54-1.34x ar's on the page and equal on a quiet machine.
    Now its prompt entries are the run's (bitwise what its own prefill computes), and it is charged the run's
    prefill forward; its tokens are those of an ar that prefilled itself, and the breakdown says so."""
    import torch

    from specviz.engine.paired_baseline import PairedBaseline
    from specviz.render.counters import breakdown_markdown
    from specviz.render.session_view import LiveRun

    run = Session(lm, method).start(CODE.messages)
    run.step(24)
    paired = PairedBaseline(run)
    alone = Session(lm, "ar").start_ids(run.prompt_ids)
    entries = len(run.prompt_ids) - 1
    assert paired.ar.prefill_from == method and alone.prefill_from is None
    for shared, own in zip(paired.ar.cache.layers, alone.cache.layers):
        assert torch.equal(shared.keys[..., :entries, :], own.keys[..., :entries, :])
        assert torch.equal(shared.values[..., :entries, :], own.values[..., :entries, :])
    assert paired.ar.prefill_s == run.prefill_s - run.setup_s and paired.ar.setup_s == 0.0
    run.run(24)
    paired.keep_up()
    alone.run(len(run.output_ids))
    assert paired.result().output_ids == alone.output_ids == run.output_ids
    assert paired.result().prefill_from == method
    breakdown = LiveRun(session=run, baseline=paired.result(), paired=True, diff=None, prompt="").breakdown()
    assert breakdown.ar.prefill_ms == breakdown.run.prefill_ms  # one forward, counted on both sides
    assert f"ar's prefill forward is {method}'s" in breakdown_markdown(breakdown)
    # a method whose drafters read the prompt, or a run whose cache stayed behind in transit, prefills itself
    assert Session(lm, "pld").start_beside(run).prefill_from is None
    run.cache, left = None, run.cache
    assert Session(lm, "ar").start_beside(run).prefill_from is None
    run.cache = left


def test_a_link_with_a_seed_replays_the_same_run_and_ar_beside_it_draws_the_same(lm):
    """The page's seed and a shared link with it: two visitors opening the link get the same tokens, and
    the ar run stepped beside each (same seed) emits them too (accept.position_noise)."""
    from urllib.parse import parse_qsl

    from app_page import CONTEXT
    from specviz.lab.share_link import query_from_settings, settings_from_query

    query = query_from_settings("racer", "auto", 24, 0.8, 1.0, 11, {}, "code-edit: code-rename")
    settings, notes = settings_from_query(dict(parse_qsl(query[1:])), CONTEXT.examples)
    assert not notes and settings["seed"] == 11
    outputs = []
    for _ in range(2):
        lab = Lab()
        lab.choose_values(model="", prompt=CONTEXT.examples[settings["example"]], method=settings["method"],
                  budget=settings["budget"], params={}, temperature=settings["temperature"],
                  top_p=settings["top_p"], seed=settings["seed"])
        for _ in lab.run(settings["max_new_tokens"]):
            pass
        outputs.append(list(lab.session.output_ids))
        assert lab.on_screen().live.baseline.output_ids == lab.session.output_ids
        counters = live_counters(lab.on_screen().live)
        assert counters.versus_ar.identical and (counters.temperature, counters.seed) == (0.8, 11)
    assert outputs[0] == outputs[1] and len(outputs[0]) == 24
