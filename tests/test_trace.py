"""Traces: every method's run round-trips through JSON, bad files get a message, version 1 still loads,
and the shipped traces replay without a model and say where they were recorded."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.errors import SpecvizError
from specviz.methods import METHODS
from specviz.records.trace import FORMAT_VERSION, MAX_TRACE_BYTES, Trace
from specviz.lab.shipped_traces import shipped_traces
from specviz.render.recording import Recording

ROOT = Path(__file__).parent.parent


PROMPT = "Repeat exactly: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta."


# ---- traces --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trace_round_trips_through_json(lm, method, tmp_path):
    from specviz.accept.sampling import SamplingSettings
    from specviz.engine.session import Session

    temperature = 0.8 if method == "rapid" else 0.0
    session = Session(lm, method, {"eta": 5.0} if method == "rapid" else {}, budget=8,
                      sampling=SamplingSettings(temperature))
    session.start(PROMPT)
    session.run(10)
    trace = session.trace()
    assert trace.format_version == FORMAT_VERSION and trace.recorded_on and trace.prompt_text
    assert all(str(t) in trace.token_texts for t in trace.output_ids)
    path = tmp_path / "trace.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    # the replay shows what the live run showed: same records, same token texts
    replayed, live = Recording.of_trace(loaded), Recording.of_session(session)
    assert replayed.records == live.records and replayed.lossless == live.lossless
    assert [replayed.token_text(t) for t in trace.output_ids] == [live.token_text(t) for t in trace.output_ids]


def test_bad_trace_files_get_a_message(tmp_path):
    cases = {"not json": "this is not JSON", "a list": "[1, 2, 3]", "another json": json.dumps({"hello": 1})}
    for name, text in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        with pytest.raises(SpecvizError, match="not a specviz trace"):
            Trace.load(path)
    good = json.loads(next(iter(shipped_traces().values())).read_text())
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**good, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(SpecvizError, match="format version"):
        Trace.load(newer)
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps({**good, "steps": [{"step": 0}]}))
    with pytest.raises(SpecvizError, match="damaged"):
        Trace.load(damaged)
    big = tmp_path / "big.json"
    with big.open("wb") as f:  # 50 MB: refused from its size, before reading it
        f.truncate(50 * 2**20)
    with pytest.raises(SpecvizError, match=f"at most {MAX_TRACE_BYTES // 2**20} MB"):
        Trace.load(big)
    binary = tmp_path / "binary.json"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(SpecvizError, match="not JSON"):
        Trace.load(binary)


def test_version_1_traces_still_load():
    # a trace of the old step layout (notes, not typed records): the format-2 fixture of a planned method,
    # without what format 2 added
    data = json.loads((Path(__file__).parent / "fixtures" / "traces_v2" / "unified-code-rename.json").read_text())
    old = {k: data[k] for k in ("model", "method", "params", "prompt_ids", "output_ids", "finish_reason", "steps")}
    trace = Trace.from_dict(old)
    # read into today's records: the trace is one of this version from then on (and saves as one)
    assert trace.format_version == FORMAT_VERSION and trace.token_text(trace.output_ids[0]).startswith("<")
    assert len(trace.steps) == len(data["steps"]) and all(step.plan is not None for step in trace.steps)


def test_shipped_traces_cover_every_method_and_replay_without_a_model():
    traces = shipped_traces()
    assert {Trace.load(p).method for p in traces.values()} >= set(METHODS)
    script = (
        "import sys; sys.path.insert(0, '.')\n"
        "from specviz.lab.lab import Lab\n"
        "from specviz.lab.public_policy import Policy\n"
        "from specviz.panels.page import build_page\n"
        "from specviz.panels.page_context import PageContext\n"
        "from specviz.runtime import shared_resources as resources\n"
        "page = build_page(PageContext.of(Policy.private()))\n"
        "for name, path in page.replay.traces.items():\n"
        "    lab = Lab(); lab.load_trace(path, name)\n"
        "    shown = page.out.shown(lab); plots = page.accounting.on_accounting(None, lab)\n"
        "    lab.go_to(0); page.out.shown(lab); lab.select_token(3); page.out.shown(lab)\n"
        "    counters = shown[page.stage.counters]\n"
        "    assert 'replay of' in counters, counters\n"
        "assert not resources.loaded('model'), resources.loaded('model')\n"
        "print('replayed', len(page.replay.traces))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"replayed {len(traces)}" in out.stdout


def test_shipped_traces_say_where_they_were_recorded():
    for path in shipped_traces().values():
        trace = Trace.load(path)
        assert trace.recorded_on and "threads" in trace.recorded_on
        assert trace.cost_curve and len(trace.cost_curve["sizes"]) == len(trace.cost_curve["ms"])
