"""The app's logic, one Lab per browser session: settings -> Session, Step / Run / Stop / Reset, the ar
baseline of the same prompt, and the counters. app.py only wires widgets to these methods."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from specviz.engine.divergence import classify, tie_threshold
from specviz.runtime.gc_pauses import collect_everything, request_collection
from specviz.runtime.modes import parse_mode, settled_here
from specviz.runtime.memory_release import give_back_freed_memory
from specviz.engine.session import Session
from specviz.errors import SpecvizError
from specviz.records.trace import Trace
from specviz.render import accounting_figures
from specviz.render.accounting_figures import Lane
from specviz.engine.prediction import ar_ms_per_token, check
from specviz.engine.run import RunResult
from specviz.lab.recording import Recording, shipped_ar_trace, shipped_trace, user_message, why_small
from specviz.render.tree_svg import tree_html
from specviz.render.step_panels import (budget_split_markdown, distribution_figure, document_html, node_choices, prediction_figure,
                            respec_step_markdown, search_step_markdown, token_diff_html, tokens_html,
                            transfer_markdown)
from specviz.lab.lab_state import CallAction, LabState, ModelCall, Settings, baseline_so_far, parse_prompt
from specviz.lab.counters import LabCounters, VersusAr, counters_markdown
from specviz.lab.fair_share import UNLIMITED, CallBudget
from specviz.lab.live_sessions import LIVE
from specviz.render.markdown_text import md_text
from specviz.render.views import AccountingView, LabView
from specviz.lab.visitor_request import checked_settings

# in the text's HTML while a first visit's recording plays by itself: the page's script stops it at the first touch
AUTOPLAY_FLAG = '<span class="autoplay-flag" hidden></span>'


# a Run shows its newest step at most this often: a browser on the same cores as the server draws each one (its
# CPU per step, docs/benchmarks.md "The first minutes on a new machine"), and the steps between are on the
# timeline when the Run ends
RUN_FRAME_S = 0.5


@dataclass
class Lab:
    """One browser session as the page sees it: its model-side state (LabState, changed only by model calls
    through ui.gpu) and what the page shows of it (a replayed trace, the timeline's step, the message, Play)."""
    state: LabState = field(default_factory=LabState)
    wanted: Settings | None = None     # the settings the next model call starts from (Lab.apply)
    stop_requested: bool = False
    message: str = ""
    # one call at a time per session: a Run that Stop cancelled may still be inside its last step when
    # the next Step arrives, and two steps at once would corrupt the KV cache
    stepping: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    replay: Trace | None = None        # a loaded trace shown instead of the live run (no model needed)
    replay_name: str = ""
    at: int | None = None              # the timeline's step; None follows the newest one
    selected_node: int | None = None   # a node picked through its token in the text, ringed in the tree
    playing: bool = False
    autoplay: bool = False             # a first visit's recording plays by itself until the visitor acts
    streaming: bool = False            # inside Run: views are drawn still (a step animation needs a play pace)
    generation: int = 0                # bumped by reset and release: a call begun before does not write back
    visitor_address: str = ""          # whose session this is (lab.fair_share): what per-visitor limits count

    # the model side, read by the views
    @property
    def session(self) -> Session | None:
        return self.state.session

    @property
    def settings(self) -> Settings | None:
        return self.state.settings

    # ---- settings -------------------------------------------------------------------------------
    @staticmethod
    def checked_prompt(prompt: str):
        """The prompt box's text as the model reads it (text, chat or long-context JSON), or a clear error."""
        return parse_prompt(prompt)

    @staticmethod
    def settings_of(model: str, prompt: str, method: str, budget, params: dict, draft_model: str = "",
                    mode: str = "", temperature=0.0, top_p=1.0, seed=0) -> Settings:
        """The widgets' values as checked Settings (no model needed): SpecvizError for bad input."""
        return checked_settings(model, prompt, method, budget, params, draft_model, mode, temperature, top_p, seed)

    def apply(self, model: str, prompt: str, method: str, budget, params: dict, draft_model: str = "",
              mode: str = "", temperature=0.0, top_p=1.0, seed=0) -> None:
        """Lab.take of loose values (the CLI's and tests' way in); bad input raises SpecvizError and changes
        nothing."""
        self.take(self.settings_of(model, prompt, method, budget, params, draft_model, mode, temperature, top_p,
                                   seed))

    def take(self, wanted: Settings) -> None:
        """Checked settings (ui.visitor_request) for the next model call; a change of any setting starts a fresh
        generation there."""
        if wanted != self.wanted:  # a mode this machine cannot run or does not know: said at once, no model needed
            notes = parse_mode(wanted.mode).notes
            self.message = " ".join(f"⚠️ {note}" for note in notes) if notes else self.message
        self.wanted = wanted

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
        generation = self.generation
        for states, messages, _ in model_calls.call(call, [self.state], budget):
            if self.generation != generation:  # reset or released meanwhile (the visitor left): drop the reply
                return
            self.state = states[0]
            yield messages[0]

    def step(self, max_new_tokens: int, budget: CallBudget = UNLIMITED) -> None:
        self.replay, self.at, self.selected_node = None, None, None  # back to the live run, at its newest step
        self.autoplay = False
        with self.stepping:
            for message in self._call(CallAction.STEP, max_new_tokens, budget=budget):
                self.message = message

    def run(self, max_new_tokens: int, every_s: float = RUN_FRAME_S, budget: CallBudget = UNLIMITED):
        """Generator for Run: steps until done or stopped, yielding at most every every_s seconds (one model
        call; Stop closes it). The session's lock is held while the call works, not while the page shows a
        reply: a Run that Stop cancelled and nobody resumes must not keep the next Step waiting."""
        self.replay, self.at, self.selected_node, self.autoplay = None, None, None, False
        self.stop_requested, self.streaming = False, True
        replies = self._call(CallAction.RUN, max_new_tokens, every_s, budget)
        generation = self.generation
        try:
            while True:
                with self.stepping:
                    message = next(replies, None)
                if message is None:
                    break
                self.message = message
                if self.stop_requested:
                    break
                yield
        finally:
            replies.close()
            self.streaming = False
            if self.generation != generation:
                # released while this Run was still holding the session: the release's collection ran while it
                # was reachable (and froze it, runtime.gc_pauses); collect now that nothing holds it
                collect_everything()
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
        self.generation += 1

    def release(self) -> None:
        """The browser session ended: stop a Run still going (it would step to its limit and run the ar
        baseline for nobody, holding the session all along), drop the KV caches and baselines now, and hand the
        freed memory back."""
        self.reset()
        self.stop_requested = True
        collect_everything()  # a session's objects refer to each other: free them now, frozen or not
        give_back_freed_memory()

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
    def held_tokens(self) -> int:
        """Context tokens this session's caches hold (what its memory grows with)."""
        return len(self.state.session.context) if self.state.session is not None else 0

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
        recording = self.recording()
        if recording is None or not recording.records:
            return None
        last = len(recording.records) - 1
        return last if self.at is None else max(0, min(self.at, last))

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

    def pause(self, message: str = "Paused.") -> None:
        if self.autoplay:
            message = "The recorded run stopped playing: ▶ Play goes on with it, Step or Run starts a live one."
        self.playing, self.autoplay, self.message = False, False, message

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
        from pathlib import Path

        trace = shipped_trace(Path(path)) if shipped else Trace.load(path)
        if not trace.steps:
            raise SpecvizError("This trace has no steps to replay.")
        kept = (self.replay, self.replay_name, self.at, self.selected_node, self.playing, self.autoplay,
                self.message)
        self.replay, self.replay_name = trace, name or Path(path).name
        self.at, self.selected_node, self.playing, self.autoplay = None, None, False, False
        try:
            for step in {0, len(trace.steps) - 1}:
                self.at = step
                self.view()
        except Exception as error:  # noqa: BLE001 (whatever a damaged trace breaks: refused, never shown)
            (self.replay, self.replay_name, self.at, self.selected_node, self.playing, self.autoplay,
             self.message) = kept
            raise SpecvizError(f"This trace could not be drawn ({type(error).__name__}): it is damaged or not "
                               "from this version of specviz.") from None
        self.at = None
        self.message = (f"Replaying {md_text(self.replay_name)} ({len(trace.steps)} steps, recorded on "
                        f"{md_text(trace.recorded_on or 'an unknown machine')}): no model needed. Step or Run "
                        "returns to the live run.")

    def export_trace(self, folder) -> str:
        """The shown run as a trace file in folder; its path."""
        from pathlib import Path

        if self.replay is not None:
            trace, stem = self.replay, Path(self.replay_name).stem
        elif self.session is not None and self.session.records:
            trace, stem = self.session.trace(), f"specviz-{self.session.name}-{len(self.session.records)}steps"
        else:
            raise SpecvizError("Nothing to download yet: Step or Run first.")
        path = Path(folder) / f"{stem}.json"
        trace.save(path)
        return str(path)

    def lossless_diff(self):
        """The output against greedy decoding where the method may differ from it (computed by the last model
        call: ui.lab_state.update_diff); None otherwise."""
        return self.state.diff

    def baseline_so_far(self) -> RunResult | None:
        """ar on the same prompt and sampling for as many tokens as the run has, where one was measured (stepped
        between the run's steps: ui.lab_state.keep_ar_up)."""
        return baseline_so_far(self.state)

    def lanes(self) -> list[Lane]:
        """The two-lane wall-clock view: the shown run, and plain ar on the same prompt when there is one
        (stepped between the run's steps; for a replay, a shipped ar trace of the same prompt)."""
        recording = self.recording()
        if recording is None or not recording.records:
            return []
        lanes = [Lane(recording.method, recording.prefill_ms, recording.records)]
        if self.replay is not None:
            ar = shipped_ar_trace(recording.prompt_ids)
            if ar is not None and recording.method != "ar":
                lanes.append(Lane("ar (shipped trace)", ar.prefill_ms, ar.steps))
        elif self.session is not None and self.session.name != "ar":
            baseline = self.baseline_so_far()
            if baseline is not None:
                lanes.append(Lane("ar", baseline.prefill_s * 1000, baseline.records))
        return lanes

    # ---- what the page shows --------------------------------------------------------------------
    def counters(self) -> LabCounters | None:
        """What the counters line shows of the live run (None before there is one)."""
        session = self.session
        if session is None:
            return None
        figures = session.stats()
        baseline = self.baseline_so_far()
        versus = None
        if baseline and figures.wall_s and baseline.wall_s:
            ar_tokens_per_s = round(baseline.tokens_per_s, 3)
            paired = session.name != "ar" and self.state.paired is not None and self.state.paired.follows(session)
            divergence = None
            if session.temperature == 0:  # sampled runs differ from greedy by design
                divergence = classify(baseline.output_ids, baseline.margins, session.output_ids, session.margins,
                                      tie_threshold(session.lm.dtype), session.lossless)
            versus = VersusAr(ar_tokens_per_s=ar_tokens_per_s,
                              speedup=round(figures.tokens_per_s / ar_tokens_per_s, 3),
                              identical=baseline.output_ids == session.output_ids, paired=paired,
                              divergence=divergence)
        return LabCounters(mode=session.lm.mode, figures=figures, temperature=session.temperature,
                           seed=session.sampling.seed, lossless=session.lossless,
                           acceptance=session.method.acceptance, acceptance_chosen="acceptance" in session.params,
                           versus_ar=versus, last_step=session.records[-1].timings_ms if session.records else None)

    def counters_markdown(self) -> str:
        return counters_markdown(self.counters(), self.session.token_text if self.session is not None else str)

    def timeline_markdown(self) -> str:
        """Counters of the shown step when it is not the live run's newest (a past step, or a replay)."""
        recording, k = self.recording(), self.shown_step()
        if recording is None or k is None:
            return self.counters_markdown()
        tokens, ms = recording.tokens_until(k), recording.ms_until(k)
        record = recording.records[k]
        t = record.timings_ms
        return " · ".join([f"**{md_text(recording.label)}**", f"**step** {k} of {len(recording.records) - 1}",
                           f"**tokens** {tokens}", f"**mean accepted / step** {tokens / (k + 1):.2f}",
                           f"**tokens/s** {1000 * tokens / ms:.1f}" if ms else "**tokens/s** -",
                           f"**this step** {len(record.accepted_tokens)} tokens, draft {t.draft:.1f} ms · "
                           f"verify {t.verify:.1f} ms (forward {t.forward:.1f}) · update {t.update:.1f} ms"])

    def document_view(self) -> str:
        """RAPID: the document with the retrieved chunks highlighted ('' for other methods)."""
        method = self.session.method if self.session and self.replay is None else None
        retrieval = getattr(method, "retrieval", None)
        if retrieval is None:
            return ""
        return document_html(method.prompt.document, retrieval.summary())

    def shown_record(self):
        recording, k = self.recording(), self.shown_step()
        return (recording.records[k], recording.token_text) if k is not None else (None, str)

    def node_choices(self) -> list[tuple[str, int]]:
        record, token_text = self.shown_record()
        return node_choices(record, token_text)

    def distribution(self, node_id) -> "object":
        """The p / q / p_hat bars at a node of the shown step."""
        record, token_text = self.shown_record()
        return distribution_figure(record, node_id, token_text)

    def step_caption(self) -> str:
        """Which step is on screen, and why its tree is empty or tiny when it is."""
        recording, k = self.recording(), self.shown_step()
        if k is None:
            return ""
        caption = f"Showing step **{k}** of {len(recording.records) - 1}" + (
            " (the newest)" if k == len(recording.records) - 1 else " (← / → keys or the buttons move)")
        reason = why_small(recording.records[k])
        return caption + (f"  \n{reason}" if reason else "")

    def accounting(self) -> AccountingView:
        """The Accounting tab up to the shown step: per-source nodes, acceptance, waste, time split, the
        two-lane view against ar, and the verify cost curve with the shown step's expected speedup."""
        recording, k = self.recording(), self.shown_step()
        records = recording.records[:k + 1] if k is not None else []
        record = records[-1] if records else None
        curve = recording.cost_curve if recording else None
        if curve is None and self.replay is None and self.session is not None and self.session.started:
            curve = self.session.cost_curve  # loaded by the model call (budget auto), else not shown
        plan = record.plan if record else None
        expected = plan.expected_curve if plan else None
        draft_ms = (plan.cut.fixed_ms if plan and plan.cut else record.timings_ms.draft) if record else 0.0
        ar_ms = self.ar_ms_per_token()
        return AccountingView(
            sources=accounting_figures.sources_figure(records), acceptance=accounting_figures.acceptance_figure(records),
            waste=accounting_figures.waste_figure(records), time_split=accounting_figures.time_split_figure(records),
            lanes=accounting_figures.lanes_figure(self.lanes()),
            cost=accounting_figures.cost_figure(curve, expected, len(record.nodes) - 1 if record else None, draft_ms,
                                        plan.verify_ms if plan else None,
                                        check([record], ar_ms) if record else None,
                                        check(records, ar_ms) if records else None))

    def ar_ms_per_token(self) -> float | None:
        """ar's measured decode ms per token on the shown run's prompt: the lane beside it (stepped between a
        live run's steps; for a replay, the shipped ar trace of its prompt, recorded on the same machine)."""
        lanes = self.lanes()
        return ar_ms_per_token(lanes[1].records) if len(lanes) > 1 else None

    def shown_prompt(self) -> str:
        """The user's message of the shown run (a recording's from its decoded prompt)."""
        if self.replay is not None:
            return user_message(self.replay.prompt_text)
        return self.settings.prompt if self.settings is not None and self.session is not None else ""

    def drop_replay(self, message: str) -> None:
        """Let an uploaded trace go (lab.fair_share needs the room): the page is back on the live run."""
        self.replay, self.replay_name, self.at, self.selected_node = None, "", None, None
        self.playing, self.autoplay, self.message = False, False, message

    def drawn(self) -> LabView:
        """view(); where a replayed step cannot be drawn (damage the trace's checks did not catch), the visitor's
        own run instead, with a message: a session is never left unable to draw itself."""
        try:
            return self.view()
        except Exception as error:  # noqa: BLE001 (whatever a damaged trace breaks: said, never raised)
            if self.replay is None:
                raise
            name, k = self.replay_name, self.shown_step()
            self.drop_replay(f"⚠️ Step {k} of {md_text(name)} could not be drawn ({type(error).__name__}): the "
                             "trace is damaged, so the page is back on your own run.")
            return self.view()

    def view(self) -> LabView:
        """What the page shows now: the shown step is the timeline's, or the newest. A step is drawn animated
        (its draft, verify, accept and commit at the play pace) except while Run streams steps in."""
        recording, k = self.recording(), self.shown_step()
        records = recording.records if recording else []
        token_text = recording.token_text if recording else str
        shown = records[:k + 1] if k is not None else []
        record = records[k] if k is not None else None
        newest_live = self.replay is None and (k is None or k == len(records) - 1)
        choices = self.node_choices()
        transfer = transfer_markdown(shown, recording.lossless) if recording else ""
        animate = not self.streaming
        document = self.document_view()
        diff = token_diff_html(self.lossless_diff() if newest_live else None, token_text)
        # the panels with nothing to show, flagged on the tree box for the page's CSS: p / q / p_hat without
        # sampling, the planner's predictions where it planned nothing, the document without RAPID, the diff
        # where there is nothing to compare
        panels = {"sampling": bool(choices), "plan": any(r.plan is not None for r in records),
                  "document": bool(document), "diff": bool(diff)}
        return LabView(
            tree=tree_html(record, token_text, animate=animate, highlight=self.selected_node, panels=panels,
                           run=f"replay:{self.replay_name}" if self.replay is not None else
                           ("live" if self.session is not None else ""), steps=len(records),
                           streaming=self.streaming),
            text_html=tokens_html(shown, token_text, self.shown_prompt(), recorded=self.replay is not None,
                                  animate_last=animate) + (AUTOPLAY_FLAG if self.autoplay else ""),
            counters=self.counters_markdown() if newest_live else self.timeline_markdown(),
            budget_split=budget_split_markdown(record),
            method_step="  \n".join(filter(None, [respec_step_markdown(record, token_text),
                                                   search_step_markdown(record), transfer])),
            token_diff_html=diff,
            # while Run streams steps in, the page keeps its figures as they were (STREAMING_KEPT), so none is
            # built for it
            prediction=None if self.streaming else prediction_figure(records), message=self.message,
            document_html=document, node_choices=choices,
            distribution=None if self.streaming else self.distribution(choices[0][1] if choices else None),
            steps=len(records), shown_step=k, caption=self.step_caption())
