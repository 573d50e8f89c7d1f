"""The timeline: moving and clamping, Play through recorded then live steps, token clicks, why a step is
small, and a replay beside the live run."""

import pytest

from specviz.records.trace import Trace
from specviz.lab.lab import Lab
from specviz.lab.shipped_traces import shipped_traces
from specviz.render.recording import Recording, accepted_path, why_small
from specviz.render.session_view import lab_view

PROMPT = "Repeat exactly: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta."


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
    view = lab_view(lab.on_screen())
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


def test_a_pause_that_comes_while_a_tick_runs_is_what_the_tick_shows(replay_lab):
    """Play's tick and Pause are separate events and may run at once: a tick that read Play as on before the Pause
    moved a step (which clears the message) after it. Its view, the last the page got, showed no Pause and its
    timer went on (the browser test waited 120 s for "Paused" beside a busy neighbour); now it says the Pause's
    words and stops."""
    lab = replay_lab
    lab.go_to(0)
    assert lab.play()
    assert lab.tick_went_on(lab.tick(64)) and lab.message == ""  # an ordinary tick: Play goes on
    lab.pause()                                                    # Pause lands while the next tick runs ...
    went_on = lab.tick(64)                                         # ... which had read Play as on, and moves
    assert went_on and lab.message == ""
    assert not lab.tick_went_on(went_on) and lab.message == "Paused." and not lab.playing
    assert lab.shown_step() == 2  # the step it moved to stays on screen
    lab.pause("Stopped by the visitor.")
    assert not lab.tick_went_on(lab.tick(64)) and lab.message == "Stopped by the visitor."


def test_a_ticks_reply_with_nothing_to_say_leaves_the_pages_message_alone(replay_lab):
    """A tick's reply can reach the page after a Pause's (the Pause's was sent while the tick's was on its way,
    beside a busy neighbour): a tick with nothing to say leaves the message the page shows, and one that says
    something (Play stopped at the end) says it."""
    from app_page import page_for

    page = page_for()
    try:
        lab = replay_lab
        lab.go_to(0)
        assert lab.play()
        out = page.stage.on_tick(None, lab, 64)
        assert out[page.stage.message] == {"__type__": "update"}  # gr.skip(): the widget keeps what it shows
        lab.go_to(len(lab.replay.steps) - 1)
        lab.playing = True
        out = page.stage.on_tick(None, lab, 64)
        assert "Play stopped" in out[page.stage.message]
        assert out[page.stage.message] == page.out.shown(lab)[page.stage.message]  # other events always say theirs
    finally:
        page.blocks.close()


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
    lab.choose_values("", PROMPT, "pld", 8, {})
    lab.step(32)
    lab.step(32)
    live_tokens = list(lab.session.output_ids)
    lab.load_trace(shipped_traces()["racer-code-rename"])
    assert lab_view(lab.on_screen()).counters.startswith("**replay of")
    assert 'data-run="replay:racer-code-rename' in lab_view(lab.on_screen()).tree  # the page's state as data, too
    lab.step(32)  # Step returns to the live run, where it was
    assert lab.replay is None and lab.session.output_ids[:len(live_tokens)] == live_tokens
    assert len(lab.session.records) == 3
    assert 'data-run="live"' in lab_view(lab.on_screen()).tree and 'data-steps="3"' in lab_view(lab.on_screen()).tree


def test_live_timeline_and_play_step_on(lm, tmp_path):
    lab = Lab()
    lab.choose_values("", PROMPT, "racer", 8, {})
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


# ---- a first visit ---------------------------------------------------------------------------------------------
def test_a_first_visit_plays_the_recording_from_its_first_step_until_touched():
    from specviz.lab.first_visit import first_view, open_first_visit

    path = shipped_traces()["unified-code-rename"]
    examples = {"code-edit: code-rename": "not this one", "other": "nor this"}
    first = first_view(path, "unified-code-rename", examples)
    assert first.view.shown_step == 0 and "Showing step **0**" in first.view.caption
    assert "recorded run" in first.view.text_html and "Rename the function" in first.view.text_html
    assert "autoplay-flag" not in first.view.text_html and first.example is None and "Rename" in first.prompt
    assert 'class="tv tv-anim"' in first.view.tree  # the step is drawn to play
    assert 'data-has-sampling="0"' in first.view.tree and 'data-has-plan="1"' in first.view.tree  # greedy, planned
    lab = open_first_visit(Lab(), path, "unified-code-rename")
    assert lab.playing and lab.autoplay and lab.shown_step() == 0 and "autoplay-flag" in lab_view(lab.on_screen()).text_html
    assert lab_view(lab.on_screen()).tree == first.view.tree  # the session's first view draws what the page painted first
    last = len(lab.replay.steps) - 1
    for k in range(1, last + 1):
        assert lab.tick(16) and lab.shown_step() == k
    assert lab.tick(16) and lab.shown_step() == 0  # a first visit plays its recording again from the start
    lab.pause()
    assert not lab.playing and not lab.autoplay and "stopped playing" in lab.message
    assert "autoplay-flag" not in lab_view(lab.on_screen()).text_html
    again = open_first_visit(Lab(), path, "unified-code-rename")
    assert not again.play() and again.playing and not again.autoplay and again.message == ""  # Play takes it over
    again.go_to(last)
    assert not again.tick(16) and not again.playing  # no longer a first visit: it stops at the end


def test_a_click_on_the_first_paint_before_the_load_event_acts_on_the_recording_and_stays():
    """The first paint shows the recording before the page's load event has made the visitor's Lab; on a busy
    machine that event waited in the queue while Pause (or ▶) ran first. Pause then made a blank Lab ("No step
    yet"), and the load event made another, which played on: CI's browser saw an empty page after Pause. Now the
    click opens the recording as the load event would, and the load event shows that same Lab as it was left."""
    from types import SimpleNamespace

    from app_page import page_for
    from specviz.lab import visitors

    page, stage = page_for(), None
    early, racing = SimpleNamespace(session_hash="click-before-load"), SimpleNamespace(session_hash="both-at-once")
    reset_first = SimpleNamespace(session_hash="reset-before-load")
    try:
        stage = page.stage
        paused = stage.on_pause(early, None)  # the session's state is still None: the load event has not run
        lab = paused[page.out.lab]
        assert lab.recording() is not None and lab.shown_step() == 0 and not lab.autoplay and not lab.playing
        assert "Showing step **0**" in paused[stage.caption]
        loaded = stage.on_first_view(None, None, early)  # the load event, its state input read before Pause wrote
        assert loaded[page.out.lab] is lab and not lab.autoplay and loaded[stage.timer].active is False
        assert "Showing step **0**" in loaded[stage.caption] and "stopped playing" in loaded[stage.message]
        # both events running at once, each seeing no state: one Lab between them, ▶'s move kept by the load event
        moved = stage.on_go(racing, None, 1)
        loaded = stage.on_first_view(None, None, racing)
        assert loaded[page.out.lab] is moved[page.out.lab] and "Showing step **1**" in loaded[stage.caption]
        # Reset pressed on the first paint: the load event leaves the Lab blank, as the visitor asked
        reset = stage.on_reset(reset_first, None)  # its reply holds the Lab, as Gradio's state then does
        loaded = stage.on_first_view(None, None, reset_first)
        assert loaded[page.out.lab] is reset[page.out.lab]
        assert loaded[page.out.lab].recording() is None and not loaded[page.out.lab].autoplay
        assert loaded[stage.timer].active is False
        # a visitor whose load event came first still gets the recording playing by itself
        fresh = stage.on_first_view(None, None, SimpleNamespace(session_hash="load-first"))
        assert fresh[page.out.lab].autoplay and fresh[stage.timer].active is True
    finally:
        for session in ("click-before-load", "both-at-once", "reset-before-load", "load-first"):
            visitors.release(session)
        page.blocks.close()


def test_a_step_on_a_first_visit_stops_its_recording_playing(lm):
    """The page sends no Pause with a first visit's Step or Run (page_style.PAGE_JS): the step ends the autoplay
    itself, so that the next tick (panels.stage.on_tick reads `playing`) stops Play instead of stepping on."""
    from specviz.lab.first_visit import open_first_visit

    lab = open_first_visit(Lab(), shipped_traces()["unified-code-rename"], "unified-code-rename")
    lab.choose_values("", PROMPT, "racer", 8, {})
    lab.step(32)
    assert not lab.playing and not lab.autoplay and len(lab.session.records) == 1


def test_a_pause_during_an_autoplay_ticks_drawing_waits_for_it_so_its_reply_stands(replay_lab):
    """CI's page once said "stopped playing" and still carried the autoplay flag: a Pause flipped the Lab while a
    tick of the first visit's recording worked, and the tick's reply (the flag, its timer running) reached the page
    after the Pause's. Now the Pause waits for the tick: the tick's view is drawn and sent first, and the Pause's,
    which the page keeps, has no flag and no timer."""
    import threading

    from app_page import page_for
    from specviz.render.session_view import AUTOPLAY_FLAG

    page = page_for()
    try:
        lab, stage = replay_lab, page.stage
        lab.go_to(0)
        lab.playing = lab.autoplay = True
        drawing, finish = threading.Event(), threading.Event()
        tick = lab.tick

        def slow_tick(*args):  # the tick's work, held until the Pause has been sent
            drawing.set()
            finish.wait(10)
            return tick(*args)

        lab.tick = slow_tick
        replies = {}
        ticker = threading.Thread(target=lambda: replies.setdefault("tick", stage.on_tick(None, lab, 64)))
        pauser = threading.Thread(target=lambda: replies.setdefault("pause", stage.on_pause(None, lab)))
        ticker.start()
        assert drawing.wait(10)
        pauser.start()
        pauser.join(0.5)
        assert pauser.is_alive() and lab.autoplay  # the Pause waits for the tick's drawing ...
        finish.set()
        ticker.join(10), pauser.join(10)
        assert AUTOPLAY_FLAG in replies["tick"][page.out.widgets["text_html"]]  # ... which was drawn while it played,
        assert AUTOPLAY_FLAG not in replies["pause"][page.out.widgets["text_html"]]  # and the Pause's view, the last, stops it
        assert replies["pause"][stage.timer].active is False and not lab.playing and not lab.autoplay
    finally:
        page.blocks.close()


def test_a_tick_after_play_stopped_draws_the_page_again_without_the_autoplay_flag(replay_lab):
    """Gradio keeps no order between one session's events: the reply of a tick drawn while the first visit's
    recording played (the autoplay flag, its timer running) can reach the page after the Pause's, as in CI beside
    two busy loops. The timer it restarted ticks once more; that tick finds Play stopped and draws the page as the
    Lab is, without the flag, and stops the timer."""
    from app_page import page_for
    from specviz.render.session_view import AUTOPLAY_FLAG

    page = page_for()
    try:
        lab, stage = replay_lab, page.stage
        lab.go_to(0)
        lab.playing = lab.autoplay = True
        stale = stage.on_tick(None, lab, 64)  # drawn while it played ...
        assert AUTOPLAY_FLAG in stale[page.out.widgets["text_html"]] and stale[stage.timer].active is True
        stage.on_pause(None, lab)             # ... and reaching the page after the Pause's reply
        mended = stage.on_tick(None, lab, 64)
        assert AUTOPLAY_FLAG not in mended[page.out.widgets["text_html"]] and mended[stage.timer].active is False
        assert "stopped playing" in lab.message and not lab.playing and lab.shown_step() == 1
    finally:
        page.blocks.close()
