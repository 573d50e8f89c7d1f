"""The settings side panel: the prompt, the method and its parameters, budget, token limit, sampling, presets
and the Model box. Its widgets by name (`by_name`) are what every event that runs a model takes as keyword
inputs, and what the door (lab.visitor_request.VisitorRequest) checks."""

from __future__ import annotations

import gradio as gr

from specviz.lab.paper_settings import paper_request, paper_settings_markdown
from specviz.lab.presets import BY_NAME as PRESETS
from specviz.lab.share_link import settings_from_query
from specviz.lab.visitor_request import PARAMS, VisitorRequest
from specviz.methods import DEFAULT_METHOD, METHODS
from specviz.tree.budget import AUTO_TEXT, BUDGET_MAX
from specviz.panels.model_panel import ModelPanel
from specviz.panels.page_context import PageContext
from specviz.panels.visitor_handler import visitor_handler


def _param_input(p):
    label = f"{p.name}: {p.help}"
    visible = p in METHODS[DEFAULT_METHOD].params
    if p.choices:
        return gr.Dropdown(list(p.choices), value=p.default, label=label, visible=visible, elem_id=f"param-{p.name}")
    return gr.Slider(p.low, p.high, value=p.default, step=1 if p.kind is int else 0.01, label=label, visible=visible,
                     elem_id=f"param-{p.name}")


def _known_method(method) -> str | None:
    return method if isinstance(method, str) and method in METHODS else None


def _refused(panel: "SettingsPanel", _, error) -> dict:
    return {panel.message: f"⚠️ {error}"}


class SettingsPanel:
    def __init__(self, context: PageContext, first_example: str | None, first_prompt: str):
        self.context, self.policy, self.examples = context, context.policy, context.examples
        with gr.Sidebar(label="Settings", open=False, width=360, elem_id="settings-panel"):
            self.example = gr.Dropdown(list(self.examples), label="Example prompts (from assets/suite.jsonl)",
                                       value=first_example, elem_id="example")
            self.prompt = gr.Textbox(label="Prompt (text, or {\"messages\": [...]} JSON for a chat)", lines=4,
                                     max_lines=12, value=first_prompt, elem_id="prompt")
            self.method = gr.Dropdown(list(METHODS), value=DEFAULT_METHOD, label="Method", elem_id="method")
            with gr.Row(elem_id="paper-row"):
                self.paper_btn = gr.Button("Paper's settings", size="sm", elem_id="paper-btn")
                self.tuned_btn = gr.Button("Our default", size="sm", elem_id="tuned-btn")
            self.paper_note = gr.Markdown(paper_settings_markdown(DEFAULT_METHOD), elem_id="paper-note")
            self.auto_budget = gr.Checkbox(value=True, label="Budget: auto (from the measured verify cost)",
                                           elem_id="auto-budget")
            self.budget = gr.Slider(1, BUDGET_MAX, value=16, step=1, label="Tree budget (draft nodes per step)",
                                    elem_id="budget")
            self.max_new_tokens = gr.Slider(1, self.policy.max_new_tokens or 1024, value=128, step=1,
                                            label="Max new tokens", elem_id="max-new-tokens")
            with gr.Accordion("Sampling", open=False):
                self.temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, elem_id="temperature",
                                             label="Temperature (0 = greedy; > 0 samples, verified by lossless "
                                                   "speculative sampling)")
                self.top_p = gr.Slider(0.01, 1.0, value=1.0, step=0.01, label="Top-p (nucleus mass)", elem_id="top-p")
                self.seed = gr.Number(value=0, label="Seed (whole number; the same seed repeats a sampled run)",
                                      elem_id="seed")
            with gr.Accordion("Method parameters", open=False, elem_id="method-params"):
                self.params = {p.name: _param_input(p) for p in PARAMS}
            with gr.Accordion("Presets: one click, one question", open=False):
                self.preset = gr.Dropdown(list(PRESETS), value=None, label="Preset", elem_id="preset")
                self.preset_question = gr.Markdown(elem_id="preset-question")
            with gr.Accordion("Model", open=False):
                self.model_panel = ModelPanel(context)
        m = self.model_panel
        # the settings widgets by name: every event that reads them takes them as keyword inputs
        self.by_name = {"model": m.model, "draft_model": m.draft_model, "mode": m.mode, "prompt": self.prompt,
                        "method": self.method, "auto_budget": self.auto_budget, "budget": self.budget,
                        "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed, **self.params}
        self.run_inputs = {"max_new_tokens": self.max_new_tokens, **self.by_name}

    # ---- wiring -----------------------------------------------------------------------------------------
    def wire(self, demo: gr.Blocks, side_a: gr.Textbox, side_b: gr.Textbox, message: gr.Markdown) -> None:
        """The panel's own events; a preset also fills the A/B sides (side_a, side_b), a link's settings say
        what they set in the page's message."""
        private = dict(api_visibility="private")  # page plumbing: no API endpoint
        self.side_a, self.side_b, self.message = side_a, side_b, message
        param_widgets = list(self.params.values())
        self.method.change(self.on_method, self.method, [*param_widgets, self.paper_note], **private)
        for button, handler in ((self.paper_btn, self.on_paper_settings), (self.tuned_btn, self.on_tuned_settings)):
            button.click(handler, None, [*self.paper_outputs, message], inputs_kwargs=self.run_inputs, **private)
        eta = self.params["eta"]
        self.temperature.change(self.eta_state, self.temperature, eta, **private)
        demo.load(self.eta_state, self.temperature, eta, **private)
        self.example.change(self.on_example, self.example, self.prompt, api_name="example")
        self.preset.input(self.on_preset, self.preset, self.preset_outputs, api_name="preset")
        self.model_panel.wire(demo)

    @property
    def preset_outputs(self) -> list:
        """/preset's answer, in this order: prompt, method, temperature, max new tokens, the A/B sides, the
        question, each method parameter."""
        return [self.prompt, self.method, self.temperature, self.max_new_tokens, self.side_a, self.side_b,
                self.preset_question, *self.params.values()]

    @property
    def paper_outputs(self) -> list:
        """The widgets a paper's configuration sets."""
        return [self.auto_budget, self.budget, self.temperature, self.top_p, *self.params.values()]

    @property
    def url_outputs(self) -> list:
        """The widgets a link's settings fill (the message comes after them)."""
        return [self.method, self.example, self.prompt, self.auto_budget, self.budget, self.max_new_tokens,
                self.temperature, self.top_p, self.seed, *self.params.values()]

    # ---- events -----------------------------------------------------------------------------------------
    def on_method(self, method) -> dict:
        """The chosen method's parameters only, and what its paper's settings change."""
        method = _known_method(method)
        own = {p.name for p in METHODS[method].params} if method else set()
        return {**{widget: gr.update(visible=name in own) for name, widget in self.params.items()},
                self.paper_note: paper_settings_markdown(method) if method else ""}

    @staticmethod
    def eta_state(temperature):
        """eta means nothing at temperature 0 (greedy verification): the slider is off there, and says why."""
        if isinstance(temperature, (int, float)) and temperature > 0:
            return gr.update(interactive=True, info="")
        return gr.update(value=0.0, interactive=False,
                         info="off at temperature 0: verification is greedy there and p_hat needs a temperature")

    def on_example(self, label):
        return self.examples.get(label, "") if isinstance(label, str) else ""

    def shown(self, request: VisitorRequest) -> dict:
        """A checked request on the settings widgets (the model's widgets apart): the one way presets and paper
        settings reach the page."""
        s = request.settings
        params = {**dict(request.page_params), **dict(s.params)}
        own = {p.name for p in METHODS[s.method].params}
        return {self.prompt: s.prompt, self.method: s.method, self.auto_budget: s.budget.auto,
                **({} if s.budget.auto else {self.budget: s.budget.nodes}),
                self.max_new_tokens: request.max_new_tokens, self.temperature: s.sampling.temperature,
                self.top_p: s.sampling.top_p, self.seed: s.sampling.seed,
                **{widget: gr.update(value=params.get(name, widget.value), visible=name in own)
                   for name, widget in self.params.items()}}

    @visitor_handler(_refused)
    def on_paper_settings(self, request: gr.Request, max_new_tokens, **settings) -> dict:
        """The paper's configuration of the page's method, applied to the page's settings through the door;
        settings it cannot apply to are named in the message."""
        return self._configuration("paper", max_new_tokens, settings)

    @visitor_handler(_refused)
    def on_tuned_settings(self, request: gr.Request, max_new_tokens, **settings) -> dict:
        """Our tuned default of the page's method, as on_paper_settings."""
        return self._configuration("ours", max_new_tokens, settings)

    def _configuration(self, which: str, max_new_tokens, settings: dict) -> dict:
        request = paper_request(VisitorRequest.from_inputs(settings, max_new_tokens, self.policy), which, self.policy)
        shown = self.shown(request)
        return {widget: shown[widget] for widget in self.paper_outputs if widget in shown}

    def on_preset(self, name) -> dict:
        """A preset's settings into the page's widgets, its A/B sides and its question."""
        preset = PRESETS.get(name) if isinstance(name, str) else None
        if preset is None:
            return {}
        shown = self.shown(preset.request(self.examples, self.policy))
        return {**{widget: shown[widget] for widget in self.preset_outputs if widget in shown},
                self.side_a: preset.side_a, self.side_b: preset.side_b,
                self.preset_question: f"**{preset.name}.** {preset.question} Press **Run both** in *A/B compare*."}

    def on_url(self, request: gr.Request, lab) -> dict:
        """Settings from the page URL's query parameters; what cannot be used is named in the message (kept in
        the session's lab, so the first visit's Play ticks, which redraw the message, keep showing it)."""
        query = dict(request.query_params) if request is not None else {}
        settings, notes = self.policy.link_settings(*settings_from_query(query, self.examples))
        updates: dict = {}
        if "method" in settings:
            updates[self.method] = gr.update(value=settings["method"])
        if "example" in settings:
            updates[self.example] = gr.update(value=settings["example"])
        prompt = self.examples[settings["example"]] if "example" in settings else settings.get("prompt")
        if prompt is not None:
            updates[self.prompt] = gr.update(value=prompt)
        budget = settings.get("budget")
        if budget is not None:
            updates[self.auto_budget] = gr.update(value=budget == AUTO_TEXT)
        if isinstance(budget, int):
            updates[self.budget] = gr.update(value=budget)
        for name, widget in (("max_new_tokens", self.max_new_tokens), ("temperature", self.temperature),
                             ("top_p", self.top_p), ("seed", self.seed)):
            if name in settings:
                updates[widget] = gr.update(value=settings[name])
        for name, widget in self.params.items():
            updates[widget] = self._param_update(name, settings)
        message = f"Settings from the link: {', '.join(settings)}." if settings else ""
        if notes:
            message += " ⚠️ Ignored: " + "; ".join(notes) + "."
        if message and lab is not None:
            lab.message = message.strip()
        if message.strip():
            updates[self.message] = message.strip()
        return updates

    @staticmethod
    def _param_update(name: str, settings: dict):
        """A parameter widget's update from a link's settings. Visibility changes only when the link names a
        method: this runs after the page has loaded, and on a busy server a visitor may already have picked
        another method, whose parameters must stay shown."""
        update = {"value": settings[name]} if name in settings else {}
        if "method" in settings:
            update["visible"] = name in {p.name for p in METHODS[settings["method"]].params}
        return gr.update(**update)
