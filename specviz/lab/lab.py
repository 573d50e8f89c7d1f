"""One browser session's state and its transitions: the settings the next model call starts from, Step / Run /
Stop / Reset through the model-call router (lab.model_calls), the timeline's step and the node picked, a replayed
trace, Play. What the page shows of it is the presenter's (render.session_view), from the OnScreen snapshot here."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specviz.engine import held_memory
from specviz.engine.session import Session
from specviz.errors import SpecvizError, as_code
from specviz.lab.fair_share import UNLIMITED, CallBudget
from specviz.lab.lab_state import CallAction, LabState, ModelCall, Settings, baseline_so_far
from specviz.lab.live_sessions import LIVE
from specviz.lab.shipped_traces import shipped_ar_trace, shipped_trace
from specviz.lab.visitor_request import VisitorRequest
from specviz.records.run_breakdown import CallTimes
from specviz.records.trace import Trace
from specviz.render.recording import Recording, shown_step
from specviz.render.session_view import LiveRun, OnScreen, lab_view
from specviz.runtime.gc_pauses import request_collection
from specviz.runtime.modes import parse_mode, settled_here

# a Run shows its newest step at most this often: a browser on the same cores as the server draws each one (its
# CPU per step, docs/benchmarks.md "The first minutes on a new machine"), and the steps between are on the
# timeline when the Run ends
RUN_FRAME_S = 0.5


# traces replay_trace has drawn (their first and last steps), by id: a trace is not changed once read, so one that
# drew once draws again (weak: a visitor's upload goes with its session)
_DRAWN: "weakref.WeakValueDictionary[int, Trace]" = weakref.WeakValueDictionary()


@dataclass
class RunClock:
    """A Run call's time on the server, by where it went (records.run_breakdown.CallTimes): computing, drawing the
    page's frames (the panel wraps its drawing in drawing()), and everything else between two frames (Gradio's
    serialisation and send)."""
    frames: int = 0
    compute_s: float = 0.0
    outside_s: float = 0.0
    drawing_s: float = 0.0
    quiet_wait_s: float = 0.0  # before its first forward (Lab.run's quiet_first)
    ended: bool = False  # the Run's steps are over: what is drawn after (its last frame, any later view) is not its

    @contextlib.contextmanager
    def drawing(self):
        started = time.perf_counter()
        try:
            yield
        finally:
            if not self.ended:
                self.drawing_s += time.perf_counter() - started

    def times(self) -> CallTimes:
        return CallTimes(frames=self.frames, compute_ms=round(self.compute_s * 1000, 2),
                         drawing_ms=round(self.drawing_s * 1000, 2),
                         sending_ms=round(max(0.0, self.outside_s - self.drawing_s) * 1000, 2),
                         quiet_wait_ms=round(self.quiet_wait_s * 1000, 2))


@dataclass
class Lab:
    """One browser session: its model-side state (LabState, changed only by model calls through lab.model_calls)
    and what is on screen of it (a replayed trace, the timeline's step, the node picked, the message, Play)."""
    state: LabState = field(default_factory=LabState)
    wanted: Settings | None = None     # the settings the next model call starts from (Lab.choose)
    stop_requested: bool = False
    message: str = ""
    # one call at a time per session: a Run that Stop cancelled may still be inside its last step when
    # the next Step arrives, and two steps at once would corrupt the KV cache
    stepping: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # the first visit's autoplay tick and Pause one at a time (panels.stage): a Pause that came while a tick drew its
    # view let the tick's reply, carrying the autoplay flag and a running timer, reach the page after the Pause's;
    # the page then said "stopped playing" while it still took the next touch for its first (CI saw it)
    playing_turn: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    replay: Trace | None = None        # a loaded trace shown instead of the live run (no model needed)
    replay_name: str = ""
    at: int | None = None              # the timeline's step; None follows the newest one
    selected_node: int | None = None   # a node picked through its token in the text, ringed in the tree
    playing: bool = False
    autoplay: bool = False             # a first visit's recording plays by itself until the visitor acts
    streaming: bool = False            # inside Run: views are drawn still (a step animation needs a play pace)
    generation: int = 0                # bumped by reset and release: a call begun before does not write back
    visitor_address: str = ""          # whose session this is (lab.fair_share): what per-visitor limits count
    clock: RunClock | None = None      # the newest Run call's time on the server (None before one)
    pause_message: str = "Paused."     # what the last Pause said (tick_went_on says it again)

    # the model side, read by the views
    @property
    def session(self) -> Session | None:
        return self.state.session

    @property
    def settings(self) -> Settings | None:
        return self.state.settings

    # ---- settings: one way in for the page (a checked VisitorRequest), one for code (loose values) ----------
    def choose(self, request: VisitorRequest) -> None:
        """The settings for the next model call, checked by the door (lab.visitor_request); a change of any setting
        starts a fresh generation there. A mode this machine cannot run or does not know is said at once."""
        wanted = request.settings
        if wanted != self.wanted:
            notes = parse_mode(wanted.mode).notes
            self.message = " ".join(f"⚠️ {note}" for note in notes) if notes else self.message
        self.wanted = wanted

    def choose_values(self, model: str, prompt: str, method: str, budget, params: dict, draft_model: str = "",
                      mode: str = "", temperature=0.0, top_p=1.0, seed=0) -> None:
        """choose() from loose values, checked by the same door: the CLI's, the benches' and the tests' way in. Bad
        input raises SpecvizError and changes nothing."""
        self.choose(VisitorRequest.of_loose(dict(model=model, prompt=prompt, method=method, budget=budget,
                                                 params=params, draft_model=draft_model, mode=mode,
                                                 temperature=temperature, top_p=top_p, seed=seed)))

    # ---- actions --------------------------------------------------------------------------------
    def _call(self, action: CallAction, max_new_tokens: int, every_s: float = 0.25, budget: CallBudget = UNLIMITED):
        """Generator over one model call on this session's state: each reply becomes the state (budget: the call's
        deadline and its visitor's leaving, lab.fair_share)."""
        from specviz.lab import model_calls

        if self.wanted is None:
            verb = "Run" if action is CallAction.RUN else "Step"
            raise SpecvizError(f"No prompt yet: enter a prompt (or pick an example), then press {verb}.")
        call = ModelCall(action, (self.wanted,), int(max_new_tokens), every_s)
        LIVE.touch(self)
        generation, counted = self.generation, False
        for states, messages, _ in model_calls.call(call, [self.state], budget):
            if self.generation != generation:  # reset or released meanwhile (the visitor left): drop the reply
                return
            self.state = states[0]
            if not counted:  # the prompt is in the caches now: the limits count this session at its real size
                LIVE.touch(self)
                counted = True
            yield messages[0]

    def step(self, max_new_tokens: int, budget: CallBudget = UNLIMITED) -> None:
        self.replay, self.at, self.selected_node = None, None, None  # back to the live run, at its newest step
        self.end_autoplay()
        with self.stepping:
            for message in self._call(CallAction.STEP, max_new_tokens, budget=budget):
                self.message = message

    def run(self, max_new_tokens: int, every_s: float = RUN_FRAME_S, budget: CallBudget = UNLIMITED,
            quiet_first: Callable[[], float] | None = None):
        """Generator for Run: steps until done or stopped, yielding at most every every_s seconds (one model
        call; Stop closes it). The session's lock is held while the call works, not while the page shows a
        reply: a Run that Stop cancelled and nobody resumes must not keep the next Step waiting.
        quiet_first() (the page's: runtime.machine_load.wait_until_quiet) waits, before the first forward, for the
        other processes on the cores this call computes on to go quiet, and says how long it waited: the click's
        own drawing in a browser on the same two cores took 1.3-1.5 cores for 0.1-0.2 s, and the prefill under it,
        charged to both the run and its ar, read long prompts' speedups 13-19% under bench's (docs/benchmarks.md,
        "Issue 70: the prefill under the click"). Never where no browser can share the cores (model_calls)."""
        self.replay, self.at, self.selected_node = None, None, None
        self.end_autoplay()
        self.stop_requested, self.streaming = False, True
        replies = self._call(CallAction.RUN, max_new_tokens, every_s, budget)
        generation = self.generation
        clock = self.clock = RunClock()
        if quiet_first is not None and self.wanted is not None:
            from specviz.lab import model_calls

            if model_calls.computes_beside_the_browser():
                clock.quiet_wait_s = quiet_first()
        try:
            while True:
                with self.stepping:
                    started = time.perf_counter()
                    message = next(replies, None)
                    clock.compute_s += time.perf_counter() - started
                if message is None:
                    break
                self.message = message
                if self.stop_requested:
                    break
                clock.frames += 1
                handed = time.perf_counter()
                yield
                clock.outside_s += time.perf_counter() - handed
        finally:
            replies.close()
            self.streaming = False
            clock.ended = True
            if self.generation != generation:
                # released while this Run was still holding the session: a collection the release asked for may
                # have run while it was reachable (and froze it, runtime.gc_pauses); ask again now nothing holds it
                request_collection()
        if self.stop_requested and self.state.session is not None:
            self.stop()
        yield

    def stop(self) -> None:
        self.stop_requested = True
        self.streaming = False  # the page's answer to Stop is whole (the Run's own last reply never comes)
        if self.session is None:
            self.message = "Nothing is running."
        else:
            self.message = (f"Stopped after {len(self.session.records)} steps "
                            f"({len(self.session.output_ids)} tokens kept). Step or Run to continue.")

    def reset(self) -> None:
        self.state, self.wanted, self.stop_requested, self.message = LabState(), None, False, "Reset."
        self.replay, self.at, self.selected_node, self.playing, self.autoplay = None, None, None, False, False
        self.clock = None
        self.generation += 1

    def release(self) -> None:
        """The browser session ended: stop a Run still going (it would step to its limit and run the ar
        baseline for nobody, holding the session all along) and drop the KV caches and baselines now. A session's
        objects refer to each other: a collection soon after frees them, frozen or not, and hands the memory back
        (runtime.gc_pauses). Not here: a full pass holds the GIL about 0.8 s, and in the soak (issue 73) the
        releases of churned sessions, three each, held it over half of the time while honest visitors waited."""
        # a session that never ran nor loaded a trace holds nothing a collection would free
        held = bool(self.state.sessions() or self.state.baselines) or self.replay is not None
        self.reset()
        self.stop_requested = True
        if held:
            request_collection()

    def release_with(self, message: str) -> None:
        """Released for the process's sake (room for other visitors, the model unloaded): the visitor reads why.
        The memory goes back by a collection soon after (runtime.gc_pauses): a release for room comes with every
        new visitor over the limit, and a full collection at each would stall everyone."""
        self.reset()
        self.stop_requested = True
        request_collection()
        self.message = message

    @property
    def holds_state(self) -> bool:
        """Whether this session holds a model's state (KV caches): what the live-session limit counts."""
        return self.state.session is not None

    @property
    def held_bytes(self) -> int:
        """What this session's model state takes in memory: the caches and drafters' tensors of its run, its
        paired ar and its greedy reference (engine.held_memory; what the live-session limits count)."""
        return sum(held_memory.session_bytes(session) for session in self.state.sessions())

    def trim_at_rest(self) -> bool:
        """While no call runs on it: its sessions give back their caches' spare room and transposed keys
        (engine.held_memory.trim; the next call's forwards make them again). False if a call is running."""
        if not self.stepping.acquire(blocking=False):
            return False
        try:
            for session in self.state.sessions():
                held_memory.trim(session)
        finally:
            self.stepping.release()
        return True

    @property
    def loaded_mode(self) -> str:
        """The mode key of the model copy this session runs on (a mode that falls back shares another's)."""
        return settled_here(self.settings.mode)[0] if self.settings is not None else ""

    # ---- timeline and replay --------------------------------------------------------------------
    def recording(self) -> Recording | None:
        """The run the page shows: a loaded trace, else the live session."""
        if self.replay is not None:
            return Recording.of_trace(self.replay, self.replay_name)
        if self.session is not None and self.session.started:
            return Recording.of_session(self.session)
        return None

    def shown_step(self) -> int | None:
        """Index of the step on screen (the timeline's, or the newest), None before the first."""
        return shown_step(self.recording(), self.at)

    def go_to(self, step) -> None:
        recording = self.recording()
        if recording is None or not recording.records:
            self.message = "Nothing to show yet: Step or Run first, or load a trace."
            return
        self.at = max(0, min(int(step), len(recording.records) - 1))
        self.selected_node, self.message = None, ""

    def go(self, delta: int) -> None:
        shown = self.shown_step()
        self.go_to((shown if shown is not None else 0) + delta)

    def select_token(self, index) -> None:
        """The user clicked output token `index`: show the step that committed it and ring its node."""
        recording = self.recording()
        found = recording.step_of_token(int(index)) if recording is not None and index is not None else None
        if found is None:
            self.message = "That token is not part of this run."
            return
        self.at, self.selected_node = found
        self.message = (f"Token {int(index)} was committed in step {found[0]}, " +
                        (f"by draft node {found[1]} (ringed)." if found[1] is not None else "as that step's bonus token."))

    def tick(self, max_new_tokens: int, budget: CallBudget = UNLIMITED) -> bool:
        """Play: one step forward (through the recorded steps, then live ones); False when there is none.
        A first visit's recording plays from its first step again when it reaches its end."""
        recording = self.recording()
        shown = self.shown_step()
        if self.autoplay and recording is not None and shown == len(recording.records) - 1:
            self.go_to(0)
            return True
        if recording is not None and shown is not None and shown < len(recording.records) - 1:
            self.go_to(shown + 1)
            return True
        from specviz.lab import model_calls

        live = self.tick_is_live(max_new_tokens)
        if live and not model_calls.zero_gpu():
            self.step(max_new_tokens, budget)
            return True
        self.playing = False
        # on ZeroGPU Play walks the recorded steps only: a GPU call per tick would spend the visitor's quota
        self.message = ("End of the recorded steps: Play stopped. Step or Run to generate more." if live
                        else "End of the run: Play stopped.")
        return False

    def tick_is_live(self, max_new_tokens: int) -> bool:
        """Whether Play's next tick past the recorded steps is a live step (the run goes on, under its limit)."""
        recording, shown = self.recording(), self.shown_step()
        if recording is not None and shown is not None and shown < len(recording.records) - 1:
            return False
        return self.replay is None and self.session is not None and not self.session.finished \
            and len(self.session.output_ids) < max_new_tokens

    def play(self) -> bool:
        """Start Play; False (with a message) when it is already playing. A replay shown at its end plays
        from the start."""
        if self.playing and self.autoplay:  # the first visit's recording plays on, now as the visitor's Play
            self.autoplay, self.message = False, ""
            return False
        if self.playing:
            self.message = "Already playing: press Pause to stop."
            return False
        self.playing, self.message = True, ""
        recording, shown = self.recording(), self.shown_step()
        if self.replay is not None and recording is not None and shown == len(recording.records) - 1:
            self.go_to(0)
        return True

    def end_autoplay(self) -> None:
        """A Step or Run of a first visit: its recording stops playing (the page sends no Pause for them)."""
        if self.autoplay:
            self.playing, self.autoplay = False, False

    def pause(self, message: str = "Paused.") -> None:
        if self.autoplay:
            message = "The recorded run stopped playing: ▶ Play goes on with it, Step or Run starts a live one."
        self.playing, self.autoplay, self.message = False, False, message
        self.pause_message = message

    def tick_went_on(self, went_on: bool) -> bool:
        """After a tick: whether Play goes on. A Pause that came while the tick ran (the two are separate events and
        may run at once) stopped Play after the tick read it as playing, and the tick's move then cleared the Pause's
        message; its view, the last the page gets, would have shown neither the Pause nor a stop. Then the tick's
        view says what the Pause said, and its timer stops."""
        if went_on and not self.playing:
            self.message = self.message or self.pause_message
            return False
        return went_on

    def open_recording(self, path, name: str) -> None:
        """A first visit: the recording from its first step, playing by itself until the visitor acts."""
        self.load_trace(path, name, shipped=True)
        self.at, self.playing, self.autoplay = 0, True, True
        self.message = ""

    def fail(self, error: Exception) -> None:
        """Bad input: say what was wrong; the session and what it generated stay as they were (Play stops)."""
        self.playing = False
        self.message = f"⚠️ {error}"

    @property
    def follows_live_run(self) -> bool:
        """Whether the page follows the live run's newest step (no replay, no past step on screen): Play's
        next tick is then a live step, which takes the page's settings as Step does."""
        return self.replay is None and self.at is None

    def load_trace(self, path, name: str | None = None, shipped: bool = False) -> None:
        """Replay a trace file (the live session, if any, is kept and comes back on Step or Run). The trace is
        checked as it is read (records.trace_check) and its first and last steps are drawn before it replaces
        what the page shows: a trace that cannot be shown is refused, and the session stays as it was."""
        self.replay_trace(shipped_trace(Path(path)) if shipped else Trace.load(path), name or Path(path).name)

    def replay_trace(self, trace: Trace, name: str) -> None:
        """Replay a trace already read (load_trace's checks and drawing, without the file)."""
        if not trace.steps:
            raise SpecvizError("This trace has no steps to replay.")
        kept = (self.replay, self.replay_name, self.at, self.selected_node, self.playing, self.autoplay,
                self.message)
        self.replay, self.replay_name = trace, name
        self.at, self.selected_node, self.playing, self.autoplay = None, None, False, False
        if _DRAWN.get(id(trace)) is not trace:  # a shipped trace, shared by every first visit, is checked once
            try:
                for step in {0, len(trace.steps) - 1}:
                    self.at = step
                    lab_view(self.on_screen())
            except Exception as error:  # noqa: BLE001 (whatever a damaged trace breaks: refused, never shown)
                (self.replay, self.replay_name, self.at, self.selected_node, self.playing, self.autoplay,
                 self.message) = kept
                raise SpecvizError(f"This trace could not be drawn ({type(error).__name__}): it is damaged or not "
                                   "from this version of specviz.") from None
            _DRAWN[id(trace)] = trace
        self.at = None
        recorded = as_code(trace.recorded_on, 80) if trace.recorded_on else "an unknown machine"
        self.message = (f"Replaying {as_code(self.replay_name, 80)} ({len(trace.steps)} steps, recorded on "
                        f"{recorded}): no model needed. Step or Run "
                        "returns to the live run.")

    def export_trace(self, folder) -> str:
        """The shown run as a trace file in folder; its path."""
        if self.replay is not None:
            trace, stem = self.replay, Path(self.replay_name).stem
        elif self.session is not None and self.session.records:
            trace, stem = self.session.trace(), f"specviz-{self.session.name}-{len(self.session.records)}steps"
        else:
            raise SpecvizError("Nothing to download yet: Step or Run first.")
        path = Path(folder) / f"{stem}.json"
        trace.save(path)
        return str(path)

    def drop_replay(self, message: str) -> None:
        """Let an uploaded trace go (lab.fair_share needs the room): the page is back on the live run."""
        self.replay, self.replay_name, self.at, self.selected_node = None, "", None, None
        self.playing, self.autoplay, self.message = False, False, message

    # ---- what is on screen ----------------------------------------------------------------------
    def on_screen(self) -> OnScreen:
        """The snapshot the presenter draws (render.session_view): the shown run, step and node, the live run
        with the ar measured beside it, and the session's flags."""
        session, replay = self.session, self.replay
        live = None
        if session is not None:
            paired = self.state.paired is not None and self.state.paired.follows(session)
            live = LiveRun(session, baseline_so_far(self.state), paired, self.state.diff,
                           self.settings.prompt if self.settings is not None else "",
                           self.clock.times() if self.clock is not None else None)
        ar = shipped_ar_trace(replay.prompt_ids) if replay is not None else None
        return OnScreen(recording=self.recording(), at=self.at, selected_node=self.selected_node,
                        replay_name=self.replay_name if replay is not None else "",
                        replay_prompt_text=replay.prompt_text if replay is not None else "",
                        ar_replay=Recording.of_trace(ar, "ar") if ar is not None else None, live=live,
                        streaming=self.streaming, autoplay=self.autoplay, message=self.message)

    def drop_undrawable_replay(self, error: Exception) -> OnScreen:
        """A replayed step could not be drawn (damage the trace's checks did not catch): the replay goes, the
        visitor's own run comes back with a message, and its snapshot is returned. A session is never left unable
        to draw itself; an error drawing the live run is the code's and is raised."""
        if self.replay is None:
            raise error
        name, k = self.replay_name, self.shown_step()
        self.drop_replay(f"⚠️ Step {k} of {as_code(name, 80)} could not be drawn ({type(error).__name__}): the "
                         "trace is damaged, so the page is back on your own run.")
        return self.on_screen()
