"""The linear kernel per tree size, measured on the machine (runtime.linear_paths): the choice rule, its storage
keyed by the processor, the decoder running each size with its kernel, calibration timing every kernel, and
a busy machine's curve measured again."""

import json

import pytest
import torch

from specviz.engine.tree_forward import tree_forward
from specviz.runtime import linear_paths
from specviz.runtime.kv import new_cache
from specviz.runtime.linear_paths import LinearChoice, choose
from specviz.runtime.loading import load_model
from specviz.tree.draft_tree import DraftTree


@pytest.fixture(autouse=True)
def _calibrating(full_calibration):
    """Every test here is about what calibration measures and stores (conftest's quick first curve off)."""

SIZES = [1, 2, 4, 8, 16, 32, 64]


@pytest.fixture(autouse=True)
def measured_for_tiny_models(monkeypatch):
    """The tiny models' weights fit in the caches, where no kernel is measured: here they stand in for a big one."""
    from specviz.runtime import loaded_model

    monkeypatch.setattr(loaded_model, "MEASURED_FROM_BYTES", 0)


def test_each_size_keeps_the_fastest_kernel_and_switches_only_where_it_saves_the_margin():
    measured = {"native": [10, 11, 12, 14, 20, 40, 80],
                "onednn": [14, 14, 13, 13.5, 19, 30, 50],  # 4% and 5% cheaper at 8 and 16: not worth a switch
                "stock": [20, 30, 30, 30, 30, 35, 70]}
    choice = choose(SIZES, measured, processor="p")
    assert choice.paths == ("native",) * 5 + ("onednn",) * 2
    assert choice.chosen_ms() == [10, 11, 12, 14, 20, 30, 50]
    assert [choice.path_for(rows) for rows in (1, 3, 16, 31, 32, 100)] == \
        ["native", "native", "native", "native", "onednn", "onednn"]
    assert choice.ranges() == [(1, 31, "native"), (32, None, "onednn")]
    lines = choice.explain()
    assert lines[0].startswith("1-31 tokens: native") and "stock" in lines[0]
    assert lines[1].startswith("32+ tokens: onednn (the others cost native 1.33-1.60x")
    # no margin: every size its fastest
    assert choose(SIZES, measured, processor="p", margin=0.0).paths[3:5] == ("onednn", "onednn")
    # the fastest at one token need not be the model's own kernel
    assert choose([1, 2], {"native": [10, 10], "stock": [5, 20]}, processor="p").paths == ("stock", "native")


def test_a_choice_reads_back_and_a_damaged_one_is_refused():
    choice = choose(SIZES, {"native": [1, 2, 3, 4, 5, 6, 7], "stock": [2, 3, 4, 5, 6, 7, 8]}, processor="p")
    assert LinearChoice.from_json(json.loads(json.dumps(choice.to_json()))) == choice
    damaged = choice.to_json() | {"paths": ["native"]}
    with pytest.raises(ValueError):
        LinearChoice.from_json(damaged)
    with pytest.raises(ValueError):
        LinearChoice.from_json(choice.to_json() | {"paths": ["turbo"] * len(SIZES)})


def test_a_stored_choice_is_read_only_on_the_processor_that_measured_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    choice = choose([1, 8], {"native": [1.0, 2.0], "stock": [3.0, 1.0]})
    linear_paths.save("model|cpu", choice)
    assert linear_paths.load("model|cpu") == choice
    monkeypatch.setattr(linear_paths, "processor_key", lambda: "another-processor")
    assert linear_paths.load("model|cpu") is None
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    linear_paths.stored_path("model|cpu").write_text("{not json")
    assert linear_paths.load("model|cpu") is None


def _tree_logits(lm, rows: int, prompt_ids: list[int]) -> torch.Tensor:
    cache = new_cache(lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([prompt_ids[:-1]]), past_key_values=cache, use_cache=True)
    tree = DraftTree(prompt_ids[-1])
    tree.add_path(list(range(20, 20 + rows - 1)), "retrieval")
    return tree_forward(lm, cache, tree, len(prompt_ids) - 1)


def test_the_decoder_runs_each_size_with_the_kernel_chosen_for_it(tiny_models, monkeypatch):
    lm = load_model(tiny_models["same"])
    if not lm.measures_linear_paths():
        pytest.skip(f"one linear kernel here: {lm.linear_candidates()}")
    lm.apply_linear_choice(None)  # from the model's own kernel at every size, whatever an earlier test stored
    ids = lm.tokenizer("The kernel per size", return_tensors="pt").input_ids[0].tolist()
    own = {rows: _tree_logits(lm, rows, ids) for rows in (1, 6)}
    other = next(k for k in lm.linear_candidates() if k != lm.linear)
    choice = LinearChoice((1, 4), (lm.linear, other), {lm.linear: (1.0, 4.0), other: (2.0, 1.0)},
                          linear_paths.processor_key())
    calls = []
    variant = lm.decoder.variant(other)
    counted = type(variant)(lambda x, w, b: calls.append(x.shape[-2]) or variant.linear(x, w, b),
                            variant.layers, variant.head)
    lm.apply_linear_choice(choice)
    lm.decoder.variants[other] = counted
    assert lm.linear_path_for(1) == lm.linear and lm.linear_path_for(6) == other
    mixed = {rows: _tree_logits(lm, rows, ids) for rows in (1, 6)}
    assert calls and set(calls) == {6}  # only the 6-token forward ran the other kernel
    assert torch.equal(mixed[1], own[1])
    assert torch.allclose(mixed[6], own[6], atol=1e-4, rtol=1e-4)  # another kernel: fp32 rounding apart
    assert "4+ tokens: " + other in lm.linear_summary()
    lm.apply_linear_choice(None)
    assert set(lm.decoder.variants) == {lm.linear}  # the measured kernels' weights are let go


def test_calibration_times_every_kernel_keeps_the_fastest_and_a_new_load_applies_it(tiny_models, tmp_path,
                                                                                  monkeypatch, quiet_machine):
    """(The machine's load reads quiet, whatever runs beside the tests: the choice is what is checked.)"""
    from specviz.engine import costmodel

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(costmodel, "why_busy", lambda *args: None)  # a tiny model's times are all noise
    monkeypatch.setattr(costmodel, "plausible", lambda ms: True)
    lm = load_model(tiny_models["same"])
    kernels = lm.linear_candidates()
    if len(kernels) < 2:
        pytest.skip(f"one linear kernel here: {kernels}")
    assert lm.describe().split("|")[3].startswith("auto-")
    cost = costmodel.calibrate(lm, sizes=(1, 4, 8), context_len=32, repeats=2)
    assert set(cost.path_ms) == set(kernels) and cost.paths == list(lm.linear_choice.paths)
    assert cost.ms == [cost.path_ms[k][i] for i, k in enumerate(cost.paths)]
    assert "linear kernel" in cost.table()
    again = load_model(tiny_models["same"])
    assert again.linear_choice == lm.linear_choice
    assert costmodel.load(again).ms == cost.ms
    # a curve of another processor is never read, and neither is one whose kernels the model no longer runs
    monkeypatch.setattr(linear_paths, "processor_key", lambda: "another-processor")
    assert costmodel.load(again) is None
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    again.apply_linear_choice(LinearChoice((1, 4, 8), ("stock",) * 3, {"stock": (1.0, 2.0, 3.0)},
                                           linear_paths.processor_key()))
    if cost.paths != ["stock"] * 3:
        assert costmodel.load(again) is None


def test_a_forced_kernel_is_the_only_one_measured(tiny_models, tmp_path, monkeypatch):
    from specviz.engine import costmodel

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    lm = load_model(tiny_models["same"], linear="stock")
    assert lm.linear_candidates() == ["stock"] and not lm.measures_linear_paths()
    assert "stock at every size (asked for)" == lm.linear_summary()
    kernels_timed = []
    real = costmodel._measure
    monkeypatch.setattr(costmodel, "_measure", lambda lm_, sizes, c, r, kernels, *rest: kernels_timed.append(kernels)
                        or real(lm_, sizes, c, r, kernels, *rest))
    monkeypatch.setattr(costmodel, "why_busy", lambda *args: None)
    cost = costmodel.calibrate(lm, sizes=(1, 4), context_len=32, repeats=1)
    assert kernels_timed == [[None]] and cost.paths is None and lm.linear_choice is None


def test_a_curve_measured_on_a_busy_machine_is_recognised(tiny_models, monkeypatch):
    from specviz.engine import costmodel

    lm = load_model(tiny_models["same"])
    quiet = {None: [[10.0, 10.2, 10.1], [12.0, 12.1, 12.3]]}
    assert costmodel.why_busy(lm, quiet, [10.1, 12.1]) is None or "reading the weights" in \
        costmodel.why_busy(lm, quiet, [10.1, 12.1])
    monkeypatch.setattr(costmodel, "weight_read_ms", lambda lm_: 5.0)
    assert costmodel.why_busy(lm, quiet, [10.1, 12.1]) is None
    noisy = {None: [[10.0, 25.0, 11.0], [12.0, 30.0, 13.0]]}
    assert "spread" in costmodel.why_busy(lm, noisy, [11.0, 13.0])
    assert "reading the weights once" in costmodel.why_busy(lm, quiet, [30.0, 32.0])
    assert "cheaper" in costmodel.why_busy(lm, quiet, [30.0, 10.0])
