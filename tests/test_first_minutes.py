"""The first minutes on a new machine: the default model's head and warm table ship in the repository (half
precision, at most 10 MB each, with their card), a fresh cache reads them instead of training or building, the
start-up trains nothing, and its stages show on the page."""

from __future__ import annotations

import os

import pytest
import torch

from specviz.runtime.shipped import COPY_LOGITS, HEADS, TRAINED


@pytest.fixture(autouse=True)
def _calibrating(full_calibration):
    """Every test here is about what calibration measures and stores (conftest's quick first curve off)."""


def test_the_repository_ships_the_default_models_head_and_table_in_half_precision_with_a_card(lm):
    from safetensors import safe_open

    from specviz.drafters import copy_logit_seed
    from specviz.runtime.draft_head import head_file_name, load_head
    from specviz.deploy.trained_files import CARD, MAX_BYTES

    head = TRAINED / HEADS / head_file_name(lm.name)
    table = TRAINED / COPY_LOGITS / copy_logit_seed.shipped_name(lm)
    assert head.is_file() and table.is_file(), "assets/trained lacks the default model's files"
    assert head.stat().st_size <= MAX_BYTES and table.stat().st_size <= MAX_BYTES
    with safe_open(str(head), framework="pt") as f:
        floats = [f.get_tensor(k).dtype for k in f.keys() if k != "draft_ids"]
    assert floats and all(dtype == torch.float16 for dtype in floats)
    loaded = load_head(lm, head)  # checked against the target: its name, shape, weights' probe, vocabulary
    assert loaded.record.training["report"]["top1_by_depth"][0] > 0.3
    seed = copy_logit_seed.load(table, lm)
    assert seed.filled > 1000
    card = (TRAINED / CARD).read_text()
    for needed in ("train-head", "seed", "Corpus", head.name, table.name, "depth", "heldout.jsonl"):
        assert needed in card, needed


def test_a_fresh_cache_drafts_with_the_shipped_head_and_table_and_builds_neither(lm, tmp_path, monkeypatch):
    from specviz.drafters import copy_logit_seed
    from specviz.runtime import draft_head

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECVIZ_HEADS", raising=False)
    assert draft_head.head_path(lm).parent == TRAINED / HEADS and draft_head.head_exists(lm)

    def no_build(*args, **kwargs):
        raise AssertionError("the warm table was built although the repository ships it")

    monkeypatch.setattr(copy_logit_seed, "build", no_build)
    table, seconds = copy_logit_seed.ensure(lm)
    assert table.filled > 1000 and seconds < 5
    assert not copy_logit_seed.seed_path(lm).exists()  # read where it ships, never copied into the cache


def test_a_table_for_another_vocabulary_is_refused(lm, tmp_path):
    import numpy as np

    from specviz.drafters import copy_logit_seed
    from specviz.drafters.copy_logit_table import CopyLogitTable, FrozenRows
    from specviz.errors import SpecvizError

    rows = FrozenRows(np.zeros((10, 4), np.int32), np.zeros((10, 4), np.float32), np.ones(10, bool))
    path = tmp_path / "t.npz"
    copy_logit_seed.save(CopyLogitTable(4, rows), path, "digest-of-another-vocabulary", half=True)
    with pytest.raises(SpecvizError, match="another vocabulary"):
        copy_logit_seed.load(path, lm)
    assert copy_logit_seed.load(path).filled == 10  # read alone, it is what it holds


def test_the_start_up_trains_nothing_and_shows_its_stages(tiny_models, tmp_path, monkeypatch, quiet_machine,
                                                           tiny_timings_pass):
    """A newcomer's machine once trained a head for 46 minutes behind their back: the start-up starts no
    child, marks each stage (with a quick cost curve, never stored) and says on the page where it stands."""
    from specviz.engine import costmodel
    from specviz.lab import head_training, startup
    from specviz.runtime.compute_thread import COMPUTE

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECVIZ_HEAD_TRAINING", "on")
    monkeypatch.setattr(costmodel, "_process_curves", {})
    started = []
    monkeypatch.setattr(head_training, "start", lambda *a, **k: started.append(a))
    status = startup.Startup()
    assert "stage 1 of" in status.markdown() and "<progress" in status.markdown()
    lm = startup._prepare(tiny_models["same"], False, status)
    ready_s, status.ready_s = status.ready_s, None
    status.current = status.stages[-1][0]
    # with every stage done the line still takes two lines (the list of stages wrapped to five at 1280x720)
    line = status.markdown()
    assert line.count("\n") == 1 and len(line) < 420 and status.stages[-1][0] in line, line
    assert startup.READY_LINE not in line  # what a page waiting for live steps reads (benches.browser_run)
    status.ready_s = ready_s
    assert started == []
    names = [name for name, _ in status.stages]
    assert names[0] == "model loaded" and names[-1].startswith("quick cost curve"), names
    assert not COMPUTE.run(costmodel.settled, lm)   # the quick curve serves this process only
    status.ready_s, status.background = 3.0, "measuring the full cost curve"
    assert "still measuring the full cost curve" in status.markdown() and startup.READY_LINE in status.markdown()
    startup.settle(lm, status, idle_before_s=0, retry_s=0, tries=3)
    # asked where the curve was measured: the compute thread (its thread count names the file)
    assert COMPUTE.run(costmodel.settled, lm) and status.background is None and status.settled_s is not None
    assert "full cost curve stored" in [name for name, _ in status.stages]


def test_the_start_ups_first_steps_take_the_model_stages_first_tries(lm, monkeypatch):
    """unified's model stage tries the head in its first steps, and the process's sessions share what it learnt:
    the start-up's steps take those tries (with the head's first call), so the first visitor's Run does not pay them
    (its first two steps drafted 23 and 4.6 ms where a later Run's drafted 0.04 ms in the stage)."""
    from specviz.drafters import stage_gain
    from specviz.lab import startup

    monkeypatch.setattr(stage_gain, "_gains", {})
    monkeypatch.setattr(stage_gain, "_since_explore", {})
    monkeypatch.setattr(stage_gain, "_recent", {})
    startup.take_first_steps("", "Rename the function `average` to `mean`:\n\ndef average(values):\n"
                                 "    return sum(values) / len(values)", "unified")
    assert stage_gain._gains, "unified's model stage was never asked"
    assert all(len(gains) >= 2 for gains in stage_gain._gains.values())  # StageGain's first_tries
