"""The verify cost curve: every size timed in turn, and a curve measured during a burst of load measured
again and never stored."""

import json

from specviz.runtime.loading import load_model


def test_a_cost_curve_measured_during_a_burst_of_load_is_measured_again_and_never_stored(tiny_models, tmp_path,
                                                                                        monkeypatch):
    """The curve a burst of load left here once (2 tokens dearer than 4, 48 dearer than 64): it was saved
    and shaped every planner decision since. Now such a curve is measured again, and one that stays so is
    used for the session but not stored; a stored one is not read."""
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

    def counted(model, cache, tree, past):
        order.append(len(tree))
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
        lambda x, w, b: (slow_calls.append(1), __import__("time").sleep(0.002), stock.linear(x, w, b))[-1],
        stock.layers, stock.head))
    kernels = [k for k in lm.linear_candidates() if k != "stock"][:1] + ["stock"]
    times = costmodel._measure(lm, (1, 4), 32, 3, kernels)
    assert order[:8] == [1, 1, 4, 4] * 2  # warm-up round, then the first timed round: both kernels
    assert [len(t) for t in times["stock"]] == [1, 1] and [len(t) for t in times[kernels[0]]] == [3, 3]
