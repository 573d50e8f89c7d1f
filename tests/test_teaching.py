"""Timeline, replay, traces, A/B, presets, URL settings: the library side (the app's wiring is in test_app)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.records.trace import FORMAT_VERSION, MAX_TRACE_BYTES, Trace
from specviz.errors import SpecvizError
from specviz.methods import METHODS
from specviz.ui.compare import Compare, parse_overrides, side_settings
from specviz.ui.lab import Lab
from specviz.ui.presets import PRESETS
from specviz.ui.recording import Recording, accepted_path, shipped_traces, why_small
from specviz.ui.share import query_from_settings, settings_from_query

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
    data = json.loads(next(iter(shipped_traces().values())).read_text())
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
        "import app\n"
        "from specviz.runtime import shared as resources\n"
        "from specviz.ui.lab import Lab\n"
        "for name, path in app.TRACES.items():\n"
        "    lab = Lab(); lab.load_trace(path, name)\n"
        "    shown = app._shown(lab); plots = app.on_accounting(lab)\n"
        "    lab.go_to(0); app._shown(lab); lab.select_token(3); app._shown(lab)\n"
        "    assert 'replay of' in shown[3], shown[3]\n"
        "assert not resources.loaded('model'), resources.loaded('model')\n"
        "print('replayed', len(app.TRACES))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"replayed {len(traces)}" in out.stdout


def test_shipped_traces_say_where_they_were_recorded():
    for path in shipped_traces().values():
        trace = Trace.load(path)
        assert trace.recorded_on and "threads" in trace.recorded_on
        assert trace.cost_curve and len(trace.cost_curve["sizes"]) == len(trace.cost_curve["ms"])


# ---- timeline on a replay ----------------------------------------------------------------------------------
@pytest.fixture
def replay_lab():
    lab = Lab()
    lab.load_trace(shipped_traces()["racer-code-rename"], "racer-code-rename")
    return lab


def test_timeline_moves_and_clamps(replay_lab):
    lab = replay_lab
    n = len(lab.replay.steps)
    assert lab.shown_step() == n - 1
    lab.go(-3)
    assert lab.shown_step() == n - 4
    lab.go(-10 * n)
    assert lab.shown_step() == 0
    lab.go_to(10 * n)
    assert lab.shown_step() == n - 1
    lab.go_to(0)
    view = lab.view()
    assert (view.steps, view.shown_step) == (n, 0) and "Showing step **0**" in view.caption
    assert "step** 0 of" in view.counters  # the counters are the shown step's


def test_play_ticks_to_the_end_then_stops(replay_lab):
    lab = replay_lab
    lab.go_to(0)
    assert lab.play() and not lab.play() and "Already playing" in lab.message
    ticks = 0
    while lab.tick(64):
        ticks += 1
    assert ticks == len(lab.replay.steps) - 1 and not lab.playing and "Play stopped" in lab.message


def test_token_click_finds_its_step_and_node(replay_lab):
    recording = replay_lab.recording()
    index = 0
    for record in recording.records:
        path = accepted_path(record)
        assert len(path) == record.num_accepted_drafts
        for k, token in enumerate(record.accepted_tokens):
            step, node = recording.step_of_token(index)
            assert step == record.step
            if k < len(path):
                assert node == path[k] and record.nodes[node].token_id == token
            else:
                assert node is None  # the bonus token
            index += 1
    replay_lab.select_token(index + 5)
    assert "not part of this run" in replay_lab.message


def test_why_a_step_is_small_is_said():
    recording = Recording.of_trace(Trace.load(shipped_traces()["racer-code-rename"]))
    small = [r for r in recording.records if len(r.nodes) <= 3]
    assert small, "the racer trace has steps with tiny trees"
    for record in small:
        reason = why_small(record)
        assert reason and ("planner" in reason or "no match" in reason or "cold" in reason or "nothing" in reason)
    assert all(why_small(r) == "" for r in recording.records if len(r.nodes) > 3)


def test_replay_keeps_the_live_session(lm):
    lab = Lab()
    lab.apply("", PROMPT, "pld", 8, {})
    lab.step(32)
    lab.step(32)
    live_tokens = list(lab.session.output_ids)
    lab.load_trace(shipped_traces()["racer-code-rename"])
    assert lab.view().counters.startswith("**replay of")
    lab.step(32)  # Step returns to the live run, where it was
    assert lab.replay is None and lab.session.output_ids[:len(live_tokens)] == live_tokens
    assert len(lab.session.records) == 3


def test_live_timeline_and_play_step_on(lm, tmp_path):
    lab = Lab()
    lab.apply("", PROMPT, "racer", 8, {})
    for _ in range(3):
        lab.step(32)
    lab.go(-2)
    assert lab.shown_step() == 0
    assert lab.play()
    assert lab.tick(32) and lab.shown_step() == 1  # through the recorded steps first
    assert lab.tick(32) and lab.shown_step() == 2
    assert lab.tick(32) and len(lab.session.records) == 4 and lab.at is None  # then live steps
    path = lab.export_trace(tmp_path)
    assert Trace.load(path).steps == lab.session.records


# ---- A/B compare -----------------------------------------------------------------------------------------------
def base_settings(**changes):
    return {"model": "", "prompt": PROMPT, "method": "racer", "budget": 8, "params": {}, "draft_model": "", "mode": "",
            "temperature": 0.0, "top_p": 1.0, "seed": 0, **changes}


def test_overrides_are_parsed_and_checked():
    assert parse_overrides("method=respec tau=3, temperature=0.8") == {"method": "respec", "tau": "3",
                                                                     "temperature": "0.8"}
    for bad, expected in [("tau", "NAME=VALUE"), ("tau=1 tau=2", "twice"), ("=3", "NAME=VALUE")]:
        with pytest.raises(SpecvizError, match=expected):
            parse_overrides(bad)
    settings = side_settings(base_settings(), {"method": "respec", "tau": "3"})
    assert settings["method"] == "respec" and settings["params"]["tau"] == "3"
    with pytest.raises(SpecvizError, match="has no parameter 'tau'"):
        side_settings(base_settings(), {"tau": "3"})


def test_ab_steps_both_and_names_the_bad_side(lm):
    compare = Compare()
    compare.apply(base_settings(), "", "method=pld")
    compare.step(24)
    compare.step(24)
    a, b = compare.a.session, compare.b.session
    assert a.name == "racer" and b.name == "pld" and len(a.records) == len(b.records) == 2
    kept = (list(a.output_ids), list(b.output_ids))
    for side_a, side_b, side in [("", "budget=0", "Side B"), ("tau=3", "", "Side A"), ("", "method=nope", "Side B"),
                                 ("", "method=rapid eta=10", "Side B")]:
        with pytest.raises(SpecvizError, match=side):
            compare.apply(base_settings(), side_a, side_b)
    assert (compare.a.session.output_ids, compare.b.session.output_ids) == kept  # neither side was touched
    for _ in compare.run(24):
        pass
    view = compare.view()
    assert "A: racer" in view.summary_a and "B: pld" in view.summary_b
    assert "Identical to side A" in view.diff_html  # both lossless at temperature 0


# ---- presets and URL settings --------------------------------------------------------------------------------
def test_presets_are_valid_configurations():
    import app

    from specviz.accept.sampling import SamplingSettings

    assert len(PRESETS) >= 4
    for preset in PRESETS:
        assert preset.example in app.EXAMPLES and preset.question.endswith((".", "?", ")"))
        for overrides in (preset.side_a, preset.side_b):
            settings = side_settings(base_settings(method=preset.method, temperature=preset.temperature),
                                     parse_overrides(overrides))
            spec = METHODS[settings["method"]]
            params = spec.resolve_params({k: v for k, v in settings["params"].items() if k in {p.name for p in spec.params}})
            spec.check_sampling(params, SamplingSettings.checked(settings["temperature"]))


def test_url_settings_round_trip_and_nonsense_is_named():
    import app

    query = query_from_settings("respec", 32, 64, 0.7, 0.9, 5, {"tau": 3.0, "m": 2}, "summarise: sum-lighthouse")
    from urllib.parse import parse_qsl

    settings, notes = settings_from_query(dict(parse_qsl(query[1:])), app.EXAMPLES)
    assert not notes
    assert settings == {"method": "respec", "budget": 32, "max_new_tokens": 64, "temperature": 0.7, "top_p": 0.9,
                        "seed": 5, "tau": 3.0, "example": "summarise: sum-lighthouse"}
    settings, notes = settings_from_query({"method": "warp-drive", "budget": "lots", "tau": "-1", "temperature": "nan",
                                           "example": "nope", "zzz": "1", "max_new_tokens": "1e9"}, app.EXAMPLES)
    assert settings == {} and len(notes) == 7
    assert any("warp-drive" in n for n in notes) and any("zzz" in n for n in notes)
