"""Run modes: flags parsed; what this machine cannot run falls back with a note, in the library, the app
and the CLI."""

import torch

from specviz.runtime import modes
from specviz.runtime.loading import load_model


# ---- modes -------------------------------------------------------------------------------------------
def test_parse_mode_flags_and_unknown_names():
    mode = modes.parse_mode("bf16+compile")
    assert mode.dtype == torch.bfloat16 and mode.compiled and not mode.notes
    assert modes.parse_mode("compile").dtype is None
    for bad in ("turbo", "fp32+bf16", "bf16+warp"):
        fallback = modes.parse_mode(bad)
        assert fallback.dtype is None and not fallback.compiled
        assert len(fallback.notes) == 1 and "default precision, eager" in fallback.notes[0]


def test_modes_the_machine_cannot_run_fall_back_with_a_note(monkeypatch):
    cpu = torch.device("cpu")
    settled = modes.settle(modes.Mode(torch.float16), cpu, torch.float32)
    assert settled.dtype == torch.float32 and "fp16" in settled.notes[0]
    monkeypatch.setattr(modes.shutil, "which", lambda name: None)
    settled = modes.settle(modes.Mode(torch.float32, compiled=True), cpu, torch.float32)
    assert not settled.compiled and "C++ compiler" in settled.notes[0]


def test_load_model_with_unknown_mode_runs_fp32_eager_and_says_so(tiny_models):
    lm = load_model(tiny_models["same"], mode="warp-speed")
    assert lm.mode == "fp32" and not lm.compiled
    assert any("warp-speed" in note for note in lm.notes)


def test_lab_shows_a_mode_fallback_and_keeps_working(lm):
    from specviz.lab.lab import Lab
    from specviz.render.session_view import live_counters

    lab = Lab()
    lab.choose_values("", "Say hi.", "racer", 8, {}, mode="warp")
    assert "warp" in lab.message and "eager" in lab.message
    lab.step(4)
    assert lab.session.lm.mode == "fp32" and live_counters(lab.on_screen().live).mode == "fp32"


def test_cli_reports_the_fallback_on_stderr(capsys):
    from specviz.cli import main  # in this process: a process per command costs ~10 s of imports and loading

    assert main(["dev", "profile", "--mode", "turbo", "--sizes", "1,2", "--repeats", "1"]) == 0
    out = capsys.readouterr()
    assert "note:" in out.err and "turbo" in out.err
    assert "ratio" in out.out and "float32" in out.out and "stock F.linear ms" in out.out
    assert main(["dev", "profile", "--sizes", "1,x"]) == 2
    err = capsys.readouterr().err
    assert "whole numbers" in err and "Traceback" not in err
