"""The stage: the bar of controls (Step, Run, Stop, Reset, ◀ ▶, Play, Pause, Present), the tree with the
generated text beside it, the counters, the message and the timeline with its play pace. Its events run the
visitor's Lab and answer through LabOutputs (built once the step-details widgets exist too)."""

from __future__ import annotations

from contextlib import nullcontext

import gradio as gr

from specviz.lab import visitors
from specviz.lab.compare import Compare
from specviz.lab.fair_share import SHARE, UNLIMITED
from specviz.lab.first_visit import FIRST_PACE_S, open_first_visit
from specviz.lab.input_values import number_in, whole_number
from specviz.lab.lab import Lab
from specviz.lab.startup import STATUS
from specviz.lab.visitor_request import VisitorRequest
from specviz.panels.lab_outputs import LabOutputs
from specviz.panels.page_context import PageContext
from specviz.panels.visitor_handler import STEP_TOKENS, model_call, register_session, visitor_handler
from specviz.render.page_style import PRESENT_JS, TITLE_HTML
from specviz.render.session_view import drawn_view
from specviz.render.tree_svg import TREE_JS
from specviz.render.views import LabView
from specviz.runtime.machine_load import wait_until_quiet

# a click on a token of the generated text sends its index
TOKEN_CLICK_JS = ("element.addEventListener('click', (event) => { const token = event.target.closest('[data-token]'); "
                  "if (token) trigger('click', {token: Number(token.dataset.token)}); });")
LIVE_STATUS_EVERY_S = 2.0  # the start-up line asks this often until live steps are ready


def _first_visit_lab(stage: "Stage") -> Lab:
    return stage.first_visit_lab()


# the stage's handlers act on the visitor's Lab; one made by a click that came before the page's load event (the
# first paint already shows the recording) opens the recording, as the load event would have
VISITOR_LAB = dict(session=Lab, made_by=_first_visit_lab)


def _refused(stage: "Stage", lab: Lab, error) -> dict:
    """Bad input: the message shown, the session (and what it generated) kept as it was."""
    return stage.out.failed(lab, error)


def _refused_play(stage: "Stage", lab: Lab, error) -> dict:
    """Bad input to Play or its timer: said, and Play stops."""
    return {**stage.out.failed(lab, error), stage.timer: gr.Timer(active=False)}


class Stage:
    def __init__(self, context: PageContext, first: LabView):
        self.context, self.policy = context, context.policy
        self._first_session_view: LabView | None = None  # every first visit's session view is the same: drawn once
        with gr.Row(elem_id="topbar", equal_height=True):
            gr.HTML(TITLE_HTML, elem_id="brand", padding=False)
            self.step_btn = gr.Button("Step", variant="primary", elem_id="step-btn", scale=0, min_width=70)
            self.run_btn = gr.Button("Run", variant="primary", elem_id="run-btn", scale=0, min_width=70)
            self.stop_btn = gr.Button("Stop", elem_id="stop-btn", scale=0, min_width=70)
            self.reset_btn = gr.Button("Reset", elem_id="reset-btn", scale=0, min_width=70)
            self.prev_btn = gr.Button("◀", elem_id="prev-btn", scale=0, min_width=48)
            self.next_btn = gr.Button("▶", elem_id="next-btn", scale=0, min_width=48)
            self.play_btn = gr.Button("▶ Play", elem_id="play-btn", scale=0, min_width=86)
            self.pause_btn = gr.Button("Pause", elem_id="pause-btn", scale=0, min_width=76)
            self.present_btn = gr.Button("Present", elem_id="present-btn", scale=0, min_width=90)
        with gr.Row(elem_id="stage", equal_height=False):
            with gr.Column(scale=17, elem_id="tree-col", min_width=560):
                self.tree = gr.HTML(first.tree, elem_id="tree-box", js_on_load=TREE_JS, padding=False)
            with gr.Column(scale=8, elem_id="text-col", min_width=320):
                self.caption = gr.Markdown(first.caption, elem_id="step-caption")
                self.text = gr.HTML(first.text_html, label="Generated text (click a token: its step and node)",
                                    elem_id="generated", js_on_load=TOKEN_CLICK_JS)
                self.counters = gr.Markdown(first.counters, elem_id="counters")
                self.live_status = gr.Markdown(elem_id="live-status")
        self.message = gr.Markdown(first.message, elem_id="message")
        with gr.Row(equal_height=True, elem_id="timeline-row"):
            self.timeline = gr.Slider(0, max(first.steps - 1, 1), value=first.shown_step or 0, step=1,
                                      label="Timeline: step shown (← / → keys)", elem_id="timeline", scale=4,
                                      interactive=first.steps > 1)
            self.pace = gr.Slider(0.2, 5.0, value=FIRST_PACE_S, step=0.1, label="Play pace (s per step)", scale=1,
                                  elem_id="pace")
        self.timer = gr.Timer(FIRST_PACE_S, active=False)
        self.live_timer = gr.Timer(LIVE_STATUS_EVERY_S, active=True)

    @property
    def view_widgets(self) -> dict:
        """The LabView fields this panel shows, by name."""
        return {"tree": self.tree, "text_html": self.text, "counters": self.counters, "message": self.message,
                "timeline": self.timeline, "caption": self.caption}

    # ---- wiring -----------------------------------------------------------------------------------------
    def wire(self, demo: gr.Blocks, out: LabOutputs, compare: gr.State, run_inputs: dict, after_run) -> gr.events.Dependency:
        """The stage's events. after_run(event) chains what follows a finished Run (the accounting's plots);
        the first visit's event is returned for the link's settings to follow it."""
        self.out, self._compare_state = out, compare
        outputs, lab = out.components, out.lab
        private = dict(api_visibility="private")
        model_events = self.context.model_events
        self.step_btn.click(self.on_step, [lab], outputs, inputs_kwargs=run_inputs, api_name="step", **model_events)
        # a Run's own steps show how it goes: no progress overlay over the outputs (its timer and spinner repaint
        # every output many times a second, on the server's cores where the browser shares them)
        run_event = self.run_btn.click(self.on_run, [lab], outputs, inputs_kwargs=run_inputs, api_name="run",
                                       show_progress="hidden", **model_events)
        after_run(run_event)
        self.stop_btn.click(self.on_stop, lab, outputs, cancels=[run_event], api_name="stop")
        self.reset_btn.click(self.on_reset, lab, outputs, api_name="reset")
        self.prev_btn.click(self.on_go, [lab, gr.Number(-1, visible=False)], outputs, api_name="previous")
        self.next_btn.click(self.on_go, [lab, gr.Number(1, visible=False)], outputs, api_name="next")
        self.timeline.release(self.on_go_to, [lab, self.timeline], outputs, api_name="go_to")
        self.text.click(self.on_token, lab, outputs, **private)
        self.play_btn.click(self.on_play, [lab, self.pace], [*outputs, self.timer], api_name="play")
        self.pause_btn.click(self.on_pause, lab, [*outputs, self.timer], api_name="pause")
        self.timer.tick(self.on_tick, [lab], [*outputs, self.timer], inputs_kwargs=run_inputs, **private,
                        **model_events)
        self.present_btn.click(None, js=PRESENT_JS, **private)
        demo.load(self.on_live_status, None, [self.live_status, self.live_timer], **private)
        self.live_timer.tick(self.on_live_status, None, [self.live_status, self.live_timer], **private)
        demo.unload(self.on_close)
        return demo.load(self.on_first_view, [lab, compare], [*outputs, compare, self.timer], **private)

    def _request(self, settings: dict, max_new_tokens) -> VisitorRequest:
        """The one door: the page's settings widgets (by name, as the API's named parameters) and the token
        limit, checked against types, ranges and this app's policy (SpecvizError)."""
        return VisitorRequest.from_inputs(settings, max_new_tokens, self.policy)

    # ---- events: generation -----------------------------------------------------------------------------
    @visitor_handler(_refused, **VISITOR_LAB)
    def on_step(self, request: gr.Request, lab, max_new_tokens, **settings) -> dict:
        """One step: a draft tree, verified. Named parameters: max_new_tokens, the settings (model, draft_model,
        mode, prompt, method, auto_budget, budget, temperature, top_p, seed) and any method parameter by name."""
        wanted = self._request(settings, max_new_tokens)
        lab.choose(wanted)
        with model_call(request, STEP_TOKENS, lab) as budget:
            lab.step(wanted.max_new_tokens, budget)
        return self.out.shown(lab)

    @visitor_handler(_refused, **VISITOR_LAB)
    def on_run(self, request: gr.Request, lab, max_new_tokens, **settings):
        """Steps to max_new_tokens or EOS, shown as they come (the same named parameters as /step)."""
        wanted = self._request(settings, max_new_tokens)
        lab.choose(wanted)
        with model_call(request, wanted.max_new_tokens, lab) as budget:
            for _ in lab.run(wanted.max_new_tokens, budget=budget, quiet_first=wait_until_quiet):
                with lab.clock.drawing():  # the frame's views, drawn here: the breakdown counts them apart
                    shown = self.out.shown(lab)
                yield shown

    @visitor_handler(_refused, **VISITOR_LAB)
    def on_stop(self, request: gr.Request, lab) -> dict:
        lab.stop()
        return self.out.shown(lab)

    @visitor_handler(_refused, **VISITOR_LAB)
    def on_reset(self, request: gr.Request, lab) -> dict:
        lab.reset()
        return self.out.shown(lab)

    # ---- events: timeline, play, linked views -----------------------------------------------------------
    @visitor_handler(_refused, **VISITOR_LAB)
    def on_go(self, request: gr.Request, lab, delta) -> dict:
        lab.go(whole_number("delta", delta, -1_000_000, 1_000_000))
        return self.out.shown(lab)

    @visitor_handler(_refused, **VISITOR_LAB)
    def on_go_to(self, request: gr.Request, lab, step) -> dict:
        lab.go_to(whole_number("step", step, 0, 10_000_000))
        return self.out.shown(lab)

    @visitor_handler(_refused, **VISITOR_LAB)
    def on_token(self, request: gr.Request, lab, evt: gr.EventData) -> dict:
        token = getattr(evt, "token", None) if evt is not None else None
        lab.select_token(token if isinstance(token, int) and not isinstance(token, bool) else None)
        return self.out.shown(lab)

    @visitor_handler(_refused_play, **VISITOR_LAB)
    def on_play(self, request: gr.Request, lab, pace) -> dict:
        # the pace slider's range: a timer of 0 s would tick as fast as the server answers
        pace_s = number_in("pace (seconds per step)", pace, 0.2, 5.0)
        if not lab.play():  # already playing: the timer runs on at its pace
            return {**self.out.shown(lab), self.timer: gr.Timer(active=True)}
        return {**self.out.shown(lab), self.timer: gr.Timer(value=pace_s, active=True)}

    @visitor_handler(_refused_play, **VISITOR_LAB)
    def on_pause(self, request: gr.Request, lab) -> dict:
        with lab.playing_turn:  # after a tick that is drawing: its reply goes first, this one's stands
            lab.pause()
            return {**self.out.shown(lab), self.timer: gr.Timer(active=False)}

    @visitor_handler(_refused_play, **VISITOR_LAB)
    def on_tick(self, request: gr.Request, lab, max_new_tokens, **settings) -> dict:
        if not lab.autoplay:  # a live tick may wait its turn for the model: Pause must not wait with it
            return self._tick(request, lab, max_new_tokens, settings)
        with lab.playing_turn:  # the first visit's recording: a Pause waits for this draw (Lab.playing_turn)
            return self._tick(request, lab, max_new_tokens, settings)

    def _tick(self, request: gr.Request, lab, max_new_tokens, settings: dict) -> dict:
        if not lab.playing:  # what stopped Play (Pause, a Step, a Run) showed the page as it is; this view says it
            # again: a tick's reply sent before that stop can still reach the page after it (Gradio keeps no order
            # between events), bringing back the autoplay flag and its timer, whose next tick lands here and mends it
            return {**self.out.shown(lab, silent_keeps_message=True), self.timer: gr.Timer(active=False)}
        if lab.follows_live_run:  # a live step uses the page's settings, through the same door as Step
            wanted = self._request(settings, max_new_tokens)
            lab.choose(wanted)
            limit = wanted.max_new_tokens
        else:
            limit = self.policy.check_new_tokens(max_new_tokens)
        live = lab.tick_is_live(limit) and not lab.autoplay
        with model_call(request, STEP_TOKENS, lab) if live else nullcontext(UNLIMITED) as budget:
            going = lab.tick_went_on(lab.tick(limit, budget))
        return {**self.out.shown(lab, silent_keeps_message=True), self.timer: gr.Timer(active=going)}

    # ---- events: the page's life ------------------------------------------------------------------------
    def first_visit_lab(self, lab: Lab | None = None) -> Lab:
        """A new visitor's Lab (or lab, where blank): the shipped recording at its first step, playing by itself."""
        first = self.context.first_trace
        return open_first_visit(lab if lab is not None else Lab(), self.context.traces.get(first), first)

    def on_first_view(self, lab, compare, request: gr.Request) -> dict:
        """A new visitor: the shipped trace plays from its first step at once (no model needed) until the
        visitor touches the page; the session's objects are registered so that closing the tab frees them. A
        click on the first paint can come first (the load event waits in the queue on a busy machine): the Lab
        it made is shown as the click left it, never restarted."""
        session = getattr(request, "session_hash", None)
        made = False
        if lab is None:
            lab, made = visitors.session_object(session, Lab, self.first_visit_lab)
        if not made and lab.generation == 0:  # a blank Lab another panel's event made: the recording opens on it as
            self.first_visit_lab(lab)         # on a new one (a Reset pressed on the first paint left it blank: stays)
        if compare is None:
            compare, _ = visitors.session_object(session, Compare, Compare)
        register_session(request, lab, compare)
        # drawn once per process: every page load asks for it, and its figures took the most Python time of a
        # crowd's page loads in the soak (docs/hostile-round-three.md)
        untouched = made and lab.autoplay and lab.shown_step() == 0  # a click may have come while this ran
        if untouched and self._first_session_view is None:  # drawn from a Lab of its own, which no click touches
            fresh = self.first_visit_lab()
            self._first_session_view = drawn_view(fresh.on_screen(), fresh.drop_undrawable_replay)
        view = self._first_session_view if untouched else None
        return {**self.out.shown(lab, view), self._compare_state: compare,
                self.timer: gr.Timer(value=FIRST_PACE_S, active=lab.autoplay)}

    def on_live_status(self):
        """The start-up line: live steps warming up, or ready (the timer stops once they are)."""
        return self.policy.shown(STATUS.markdown()), gr.Timer(active=not (STATUS.ready or STATUS.error))

    @staticmethod
    def on_close(request: gr.Request):
        """The visitor closed the page: their running calls stop at their next step, their sessions go."""
        session = getattr(request, "session_hash", None)
        SHARE.cancel(session)
        visitors.release(session)
