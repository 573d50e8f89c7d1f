"""The verify cost curve: every size timed in turn, and a curve measured during a burst of load measured
again and never stored."""

import json
import types

import pytest

from specviz.runtime.loading import load_model


@pytest.fixture(autouse=True)
def _calibrating(full_calibration):
    """Every test here is about what calibration measures and stores (conftest's quick first curve off)."""


def test_a_cost_curve_measured_during_a_burst_of_load_is_measured_again_and_never_stored(tiny_models, tmp_path,
                                                                                        monkeypatch, quiet_machine):
    """The curve a burst of load left here once (2 tokens dearer than 4, 48 dearer than 64): it was saved
    and shaped every planner decision since. Now such a curve is measured again, and one that stays so is
    used for the session but not stored; a stored one is not read. (The curve's shape is what is checked: the
    machine's load reads quiet, whatever else runs beside the tests.)"""
    from specviz.engine import costmodel

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    lm = load_model(tiny_models["same"], linear="stock")  # one kernel: the curve is its medians
    sizes = (1, 2, 4, 8, 48, 64)
    skewed, clean = [26.3, 42.5, 18.4, 22.3, 576.4, 94.9], [14.2, 14.9, 16.0, 19.2, 52.8, 62.3]
    assert not costmodel.plausible(skewed) and costmodel.plausible(clean)
    assert costmodel.plausible([34.5, 53.1, 52.2, 50.6])  # fp32 F.linear at 1, 2, 4, 8 rows: 5% dips happen
    measured = [skewed, clean]
    # three quiet repeats around each median (their spread: 2%)
    monkeypatch.setattr(costmodel, "_measure", lambda *args: {None: [[0.99 * t, t, 1.01 * t] for t in measured.pop(0)]})
    assert costmodel.calibrate(lm, sizes=sizes).ms == clean and measured == []
    assert costmodel.load(lm).ms == clean
    measured.extend([skewed] * costmodel.CALIBRATION_ATTEMPTS)
    costmodel.stored_path(lm).unlink()
    assert costmodel.calibrate(lm, sizes=sizes).ms == skewed and measured == []
    assert not costmodel.stored_path(lm).exists()
    stored = costmodel.CostModel(sizes=list(sizes), ms=skewed, context_len=512, model=lm.name, device="cpu",
                                 dtype="float32", threads=2)
    costmodel.stored_path(lm).write_text(json.dumps(costmodel.asdict(stored)))
    assert costmodel.load(lm) is None


def test_calibration_times_every_size_in_turn(tiny_models, tmp_path, monkeypatch):
    """Sizes take turns, so a burst lands in one round of each size; the medians leave it out."""
    from specviz.engine import costmodel
    from specviz.runtime import loaded_model

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(loaded_model, "MEASURED_FROM_BYTES", 0)  # a tiny model standing in for a big one
    lm = load_model(tiny_models["same"])
    order = []
    real_forward = costmodel.tree_forward
    # the calibration's clock is scripted: each forward takes 1 ms, and the slow kernel's linear calls add to it,
    # so which kernel is dearer never depends on what else runs on the machine
    clock = [0.0]
    monkeypatch.setattr(costmodel, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def counted(model, cache, tree, past):
        order.append(len(tree))
        clock[0] += 0.001
        return real_forward(model, cache, tree, past)

    monkeypatch.setattr(costmodel, "tree_forward", counted)
    times = costmodel._measure(lm, (1, 4, 8), 32, 3)
    assert order == [1, 4, 8] * 4 and len(times[None]) == 3 and all(len(t) == 3 and min(t) > 0 for t in times[None])
    # with several kernels each size times each kernel in turn, and a kernel 1.5x dearer than the best at every
    # size after the first timed round is timed no more
    order.clear()
    slow_calls = []
    stock = lm.decoder.variant("stock")
    monkeypatch.setitem(lm.decoder.variants, "stock", type(stock)(
        lambda x, w, b: (slow_calls.append(1), clock.__setitem__(0, clock[0] + 0.002), stock.linear(x, w, b))[-1],
        stock.layers, stock.head))
    kernels = [k for k in lm.linear_candidates() if k != "stock"][:1] + ["stock"]
    times = costmodel._measure(lm, (1, 4), 32, 3, kernels)
    assert order[:8] == [1, 1, 4, 4] * 2  # warm-up round, then the first timed round: both kernels
    assert [len(t) for t in times["stock"]] == [1, 1] and [len(t) for t in times[kernels[0]]] == [3, 3]


def test_a_calibration_beside_a_busy_process_is_used_but_never_stored(tiny_models, tmp_path, monkeypatch,
                                                                     tiny_timings_pass):
    """The curve a newcomer's machine stored while a head trained beside it read twice the quiet figures and
    priced every later tree. Now the others' CPU time is read before and while it is measured: a curve measured
    while others used the machine is used and not stored (it says why and how busy), and once they stop it is
    stored with how quiet the machine was. The readings are scripted (conftest.ScriptedLoad): what else runs
    beside the tests moves nothing here; the reading itself is the next test's."""
    from conftest import ScriptedLoad, machine_reading
    from specviz.engine import costmodel
    from specviz.runtime import machine_load

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    lm = load_model(tiny_models["same"], linear="stock")
    busy_reading, quiet_reading = machine_reading(1.96), machine_reading(0.01)
    # quiet before, busy while it was measured: the busier of the two is what the curve records
    script = ScriptedLoad(monkeypatch, [quiet_reading, busy_reading])
    busy = costmodel.calibrate(lm, sizes=(1, 2, 4), context_len=32, repeats=3)
    assert busy.busy is not None and "other processes used 1.96 of 2 cores" in busy.busy, busy.busy
    assert busy.machine_load == busy_reading and script.read == [quiet_reading, busy_reading]
    assert not costmodel.stored_path(lm).exists() and costmodel.load(lm) is None
    # busy before it starts: measured once (measuring again now would not help), used, not stored
    script = ScriptedLoad(monkeypatch, [busy_reading, quiet_reading])
    assert costmodel.calibrate(lm, sizes=(1, 2, 4), context_len=32, repeats=3).busy is not None
    assert len(script.read) == 2 and not costmodel.stored_path(lm).exists()
    ScriptedLoad(monkeypatch, [quiet_reading])
    quiet = costmodel.calibrate(lm, sizes=(1, 2, 4), context_len=32, repeats=3)
    assert quiet.busy is None and quiet.machine_load.quiet, quiet.machine_load
    stored = json.loads(costmodel.stored_path(lm).read_text())
    assert stored["machine_load"]["others_cores"] <= machine_load.QUIET_OTHERS_CORES
    assert costmodel.load(lm).ms == quiet.ms


def test_the_machine_load_reads_two_busy_processes_beside_it_and_quiet_after_them():
    """The reading the cost curve trusts (runtime.machine_load): two busy loops beside this process read as more
    than QUIET_OTHERS_CORES (true however busy the machine already is), and after they stop the machine reads quiet
    again, which only a quiet machine can show: that half skips, with the reading, where the machine was busy before
    the test began (a laptop with a browser open, a CI neighbour)."""
    import subprocess
    import sys
    import time

    from specviz.runtime import machine_load

    before = machine_load.sample(0.5)
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        beside = machine_load.sample(1.0)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert beside.others_cores > machine_load.QUIET_OTHERS_CORES and beside.why_busy() is not None, beside
    if not before.quiet:
        pytest.skip(f"the machine was busy before the test ({before.why_busy()}): its quiet reading cannot be checked")
    after = machine_load.sample(0.5)
    for _ in range(4):  # the loops' exit takes a moment to show; a machine's own blips, a few tries
        if after.quiet:
            break
        time.sleep(0.5)
        after = machine_load.sample(0.5)
    assert after.quiet, after


def test_the_quick_curve_serves_until_a_full_one_is_stored_and_a_visitor_stops_the_full_one(
        tiny_models, tmp_path, monkeypatch, quiet_machine, tiny_timings_pass):
    """A first step is planned on a quick curve (a few sizes, the model's own kernel, never stored); the full
    calibration comes later, stops before its next forward when a visitor's call starts, and is stored when it
    ends on a quiet machine."""
    from specviz.engine import costmodel

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(costmodel, "_process_curves", {})
    lm = load_model(tiny_models["same"], linear="stock")
    quick = costmodel.quick_curve(lm)
    assert quick.sizes == list(costmodel.QUICK_SIZES) and not costmodel.settled(lm)
    assert costmodel.load_or_calibrate(lm) is quick  # this process plans with it; nothing stored
    asked = []
    assert costmodel.recalibrate(lm, stop=lambda: asked.append(1) or len(asked) > 3) is None
    assert len(asked) == 4 and not costmodel.settled(lm) and costmodel.load_or_calibrate(lm) is quick
    full = costmodel.recalibrate(lm)
    assert full is not None and full.busy is None and costmodel.settled(lm)
    assert costmodel.load_or_calibrate(lm).ms == full.ms

