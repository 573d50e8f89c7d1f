"""Where a Run's time went (records.run_breakdown, behind the counters line): each of the two runs the speedup
compares split into what its tokens/s counts, adding up to its wall time; the Run's call on the server apart (its
frames drawn and handed on, the bookkeeping between steps); and a session that finds no cost curve in the app plans
on the quick one while the full one is scheduled, never measuring minutes inside a visitor's step."""

import time
import pytest

from specviz.lab.lab import Lab
from specviz.render.counters import breakdown_markdown
from specviz.render.session_view import live_counters, live_counters_markdown


def test_a_runs_breakdown_adds_up_to_what_its_counters_count(lm):
    lab = Lab()
    lab.choose_values(model="", prompt="Repeat exactly: one two three four, one two three four, one two three four.",
                      method="unified", budget="auto", params={})
    for _ in lab.run(32):
        pass
    live = lab.on_screen().live
    breakdown = live.breakdown()
    run, ar, call = breakdown.run, breakdown.ar, breakdown.call
    figures = live.session.stats()
    assert run.method == "unified" and ar.method == "ar" and run.tokens == ar.tokens == figures.new_tokens
    assert run.counted_ms == pytest.approx(figures.wall_s * 1000, abs=0.5)     # what tokens/s divides by
    assert ar.counted_ms == pytest.approx(live.baseline.wall_s * 1000, abs=0.5)
    assert run.setup_ms > 0 and run.setup_ms + run.prefill_ms == pytest.approx(live.session.prefill_s * 1000, abs=0.05)
    assert run.steps == len(live.session.records) and ar.steps == ar.tokens and run.first_step_ms >= 0
    assert run.draft_ms > ar.draft_ms  # the method drafts; ar's tree is its root
    assert call.frames >= 1 and call.compute_ms >= run.counted_ms  # the call computed both runs, and more
    assert breakdown.bookkeeping_ms is not None and breakdown.bookkeeping_ms >= 0
    shown = live_counters_markdown(live)
    assert "<details><summary>Where this run's time went</summary>" in shown and "| **counted**" in shown
    assert f"unified ({run.tokens} tokens)" in shown and f"ar ({ar.tokens} tokens)" in shown
    assert live_counters(live).breakdown == breakdown
    lab.reset()
    assert lab.clock is None


def test_without_a_call_the_breakdown_says_only_what_the_runs_counted():
    from specviz.records.run_breakdown import RunBreakdown, RunTimes
    from specviz.records.step import StepRecord, StepTimings

    records = [StepRecord(step=i, prefix_len=10 + i, budget=1, budget_mode="auto", nodes=[], accepted_tokens=[1],
                          accepted_origins=[], allocation={}, timings_ms=StepTimings(draft=1.0, verify=10.0,
                                                                                     forward=9.0, update=2.0,
                                                                                     total=13.0 + 10 * (i == 0)))
               for i in range(3)]
    times = RunTimes.of("pld", 3, 0.5, 0.1, records)
    assert times.setup_ms == 100.0 and times.prefill_ms == 400.0 and times.forward_ms == 27.0
    assert times.accept_ms == 3.0 and times.counted_ms == pytest.approx(500 + 3 * 13.0)
    assert times.first_step_ms == 23.0 and times.median_step_ms == 13.0 and times.first_step_extra_ms == 10.0
    shown = breakdown_markdown(RunBreakdown(times, None, None))
    assert "pld (3 tokens)" in shown and "Not counted" not in shown
    assert RunBreakdown(times, None, None).bookkeeping_ms is None


def test_a_session_without_a_curve_plans_on_the_quick_one_and_the_full_one_is_scheduled(tiny_models, tmp_path,
                                                                                         monkeypatch, full_calibration):
    """The app registers background calibration (lab.startup): a session in a mode or model no curve was measured
    for gets the quick curve at once and the full one is scheduled once; without the app, the full one is measured
    at once (the command line's runs are measurements themselves)."""
    from specviz.engine import costmodel
    from specviz.engine.session import Session
    from specviz.runtime.loading import load_model

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    lm = load_model(tiny_models["same"], linear="stock")
    measured = []
    monkeypatch.setattr(costmodel, "calibrate", lambda lm_, sizes=costmodel.CALIBRATION_SIZES, **kw: measured.append(
        tuple(sizes)) or costmodel.CostModel(sizes=list(sizes), ms=[1.0 + s for s in sizes], context_len=32,
                                             model=lm_.name, device="cpu", dtype="float32", threads=1))
    scheduled = []
    costmodel.measure_later_with(scheduled.append)
    session = Session(lm, "pld").start("the cat sat on the mat")
    assert session.cost_model.sizes == list(costmodel.QUICK_SIZES) and measured == [costmodel.QUICK_SIZES]
    assert scheduled == [lm]
    Session(lm, "pld").start("the dog").cost_model  # noqa: B018 (the process's quick curve again, no new schedule)
    assert measured == [costmodel.QUICK_SIZES] and scheduled == [lm]
    costmodel.measure_later_with(None)
    costmodel._process_curves.clear()
    assert Session(lm, "pld").start("the cat").cost_model.sizes == list(costmodel.CALIBRATION_SIZES)


def test_a_runs_clock_stops_counting_when_its_steps_end():
    # the Run's last frame, and any view drawn later (a failed Step re-shows the counters), is not the Run's: the
    # counters shown after a refusal must read as they did
    from specviz.lab.lab import RunClock

    clock = RunClock()
    with clock.drawing():
        time.sleep(0.01)
    counted = clock.times()
    assert counted.drawing_ms >= 10
    clock.ended = True
    with clock.drawing():
        time.sleep(0.01)
    assert clock.times() == counted


def test_the_page_against_bench_reads_medians_and_the_tolerance():
    """dev app-load --part versus-bench (benches.page_versus_bench): an example is within the issue's 10% when the
    median page speedup over the median bench speedup is, either way."""
    from specviz.benches.page_versus_bench import ExampleReading

    def reading(page, bench):
        return ExampleReading("x", page, bench, [46] * len(page), [46] * len(bench), [2.0] * len(bench))

    near = reading([1.3, 1.5, 1.4], [1.45, 1.35])
    assert near.page_median == 1.4 and near.bench_median == pytest.approx(1.4) and near.within
    assert not reading([1.2, 1.24], [1.4, 1.42]).within            # 0.86: below
    assert not reading([1.6, 1.6], [1.4, 1.42]).within             # 1.13: above
    assert reading([1.26, 1.28], [1.4, 1.4]).to_dict()["page_over_bench"] == pytest.approx(0.907, abs=1e-3)


def test_waiting_for_quiet_cores_stops_at_the_first_quiet_window_and_at_its_cap():
    """runtime.machine_load.wait_until_quiet reads the others' use of the cores window by window (injected here:
    no test depends on how busy this machine is)."""
    from specviz.runtime.machine_load import MachineLoad, wait_until_quiet

    def readings(*cores):
        seen = []

        def read(seconds):
            seen.append(seconds)
            return MachineLoad(cores[min(len(seen), len(cores)) - 1], 0.0, 0.0, 2, seconds)
        return read, seen

    read, seen = readings(0.0)
    wait_until_quiet(cap_s=0.5, window_s=0.1, cores=0.3, read=read)
    assert seen == [0.1]                                  # quiet at once: one window
    read, seen = readings(1.4, 0.9, 0.2, 0.0)
    wait_until_quiet(cap_s=0.5, window_s=0.1, cores=0.3, read=read)
    assert len(seen) == 3                                 # the browser's burst, then quiet
    read, seen = readings(1.0)
    wait_until_quiet(cap_s=0.5, window_s=0.1, cores=0.3, read=read)
    assert len(seen) == 5                                 # never quiet: at most cap / window windows


def test_a_run_beside_the_browser_waits_for_quiet_cores_and_its_breakdown_says_so(lm, monkeypatch):
    """The page's Run waits (quiet_first) before its first forward where a browser may share the cores, and the
    breakdown counts the wait on neither side; on a Space (the browsers are elsewhere) it never waits."""
    prompt = "Repeat exactly: one two three four, one two three four."
    waits = []

    def quiet_first():
        waits.append(1)
        return 0.25

    monkeypatch.delenv("SPACE_ID", raising=False)
    lab = Lab()
    lab.choose_values(model="", prompt=prompt, method="pld", budget="auto", params={})
    for _ in lab.run(8, quiet_first=quiet_first):
        pass
    breakdown = lab.on_screen().live.breakdown()
    assert waits == [1] and breakdown.call.quiet_wait_ms == 250.0
    assert breakdown.run.counted_ms < breakdown.call.compute_ms + 1  # the wait is in neither side's count
    assert "250 ms waited before the first forward" in live_counters_markdown(lab.on_screen().live)
    monkeypatch.setenv("SPACE_ID", "someone/specviz")
    lab = Lab()
    lab.choose_values(model="", prompt=prompt, method="pld", budget="auto", params={})
    for _ in lab.run(8, quiet_first=quiet_first):
        pass
    assert waits == [1] and lab.on_screen().live.breakdown().call.quiet_wait_ms == 0.0
    assert "waited before the first forward" not in live_counters_markdown(lab.on_screen().live)
