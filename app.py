"""specviz: the Gradio app. A thin layer: every action calls specviz.lab.lab.Lab, which holds the logic."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

try:  # ZeroGPU: `spaces` must come before anything touches CUDA (elsewhere its GPU decorator changes nothing)
    import spaces  # noqa: F401
except ImportError:
    spaces = None

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # the app works offline; it phones nobody

import gradio as gr  # noqa: E402

from specviz.errors import SpecvizError, quoted  # noqa: E402
from specviz.lab.lab import Lab
from specviz.panels.static_tree_tab import StaticTreeTab
from specviz.lab import model_calls
from specviz.lab.lab_state import ModelCall, SweepRequest
from specviz.lab.public_policy import Policy
from specviz.runtime.shared import shared_model
from specviz.engine.suite import example_prompts, load_suite
from specviz.methods import BUDGET_MAX, DEFAULT_METHOD, METHODS
from specviz.runtime.loading import DEFAULT_MODEL
from specviz.render.step_panels import distribution_figure, prediction_figure
from specviz.lab.first_visit import FIRST_PACE_S, first_view, open_first_visit
from specviz.render.page_style import PAGE_CSS, PAGE_JS, PRESENT_JS, TITLE_HTML
from specviz.lab.paper_settings import paper_settings_markdown, widget_values
from specviz.render.tree_svg import TREE_JS
from specviz.lab import head_training
from specviz.lab import visitors
from specviz.lab.compare import Compare
from specviz.lab.presets import BY_NAME as PRESETS
from specviz.lab.recording import shipped_traces
from specviz.lab.share_link import query_from_settings, settings_from_query
from specviz.render.slides import write_tree_svg
from specviz.render.views import AccountingView, CompareView, LabView
from specviz.records.trace import MAX_TRACE_BYTES
from specviz.lab.input_values import MAX_TOKENS_PRIVATE, number_in, text_value, whole_number
from specviz.lab.live_sessions import LIVE
from specviz.lab.visitor_request import MAX_NAME_CHARS, PARAMS, VisitorRequest

MAX_TRACE_MB = MAX_TRACE_BYTES // 2**20

ASSETS = Path(__file__).parent / "assets"
EXAMPLES = example_prompts(ASSETS / "suite.jsonl")


# the widgets that show a LabView, by field (steps and shown_step together set the timeline slider); the
# outputs of every Lab event are [lab, *these widgets] in this order (build_app maps names to widgets)
VIEW_WIDGETS = ("tree", "text_html", "counters", "budget_split", "method_step", "token_diff_html", "prediction",
                "message", "document_html", "node_choices", "distribution", "timeline", "caption")
TRACES = shipped_traces()
FIRST_TRACE = (f"{DEFAULT_METHOD}-code-rename" if f"{DEFAULT_METHOD}-code-rename" in TRACES
               else next(iter(TRACES), None))
DEFAULT_PACE_S = FIRST_PACE_S
# a click on a token of the generated text sends its index
TOKEN_CLICK_JS = ("element.addEventListener('click', (event) => { const token = event.target.closest('[data-token]'); "
                  "if (token) trigger('click', {token: Number(token.dataset.token)}); });")
LAUNCH_OPTIONS = {"css": PAGE_CSS, "js": PAGE_JS}
# model events at once: 2 answered 8 concurrent visitors sooner than 1 or 4 on 2 cores (README, "Many visitors")
MODEL_CONCURRENCY = int(os.environ.get("SPECVIZ_MODEL_CONCURRENCY", "2"))
SESSION_TTL_S = int(os.environ.get("SPECVIZ_SESSION_TTL", "1800"))
MAX_AXIS_CHARS = 500   # a sweep axis's text (NAME=V1,V2,...): far more than 64 grid points need
# Gradio's cache of files handed to browsers (downloads): swept every 15 minutes of what is over an hour old
DELETE_CACHE = (900, 3600)

DRAFT_MODELS = [("default: the trained draft head when there is one, else self", ""),
                ("head: the draft head trained for the target (python -m specviz train-head)", "head"),
                ("self: the target's own weights (self-speculation)", "self"),
                ("self-skip:8: the target's first 8 layers (cheap, untrained)", "self-skip:8")]
HEAD_STATUS_EVERY_S = 30  # the page asks how the background training of the head goes this often
# what visitors may ask for: everything here, an allow-list and limits in public mode (SPACE_ID set, or --public)
POLICY = Policy.from_environment()
RUN_MODES = [("device default (CPU: fp32, exact)", ""),
             ("bf16: faster on big trees, not bitwise exact (differences classified)", "bf16"),
             ("fp32 + torch.compile (slower on this CPU; compiles on first use)", "compile"),
             ("bf16 + torch.compile", "bf16+compile")]


def _request(settings: dict, max_new_tokens) -> VisitorRequest:
    """The one door (ui.visitor_request): the page's settings widgets (by name, as the API's named parameters)
    and the token limit, checked against types, ranges and this app's policy (SpecvizError)."""
    return VisitorRequest.from_inputs(settings, max_new_tokens, POLICY)


def _widget_values(view: LabView) -> dict:
    """Each VIEW_WIDGETS widget's value from the view's fields: the node list becomes the dropdown's
    choices, steps and shown_step the timeline slider, every other field goes as it is (a panel with nothing
    to show is hidden by the page's CSS, from the tree box's flags: the API's values stay plain)."""
    values = {name: getattr(view, name) for name in VIEW_WIDGETS if hasattr(view, name)}
    choices = view.node_choices
    values["node_choices"] = gr.update(choices=choices, value=choices[0][1] if choices else None)
    values["timeline"] = gr.update(maximum=max(view.steps - 1, 1), value=view.shown_step or 0,
                                   interactive=view.steps > 1)
    return values


def _shown(lab: Lab):
    """lab.view() as the outputs of a Lab event: [lab, *VIEW_WIDGETS]."""
    values = _widget_values(lab.view())
    values["message"] = POLICY.shown(values["message"])
    return (lab, *(values[name] for name in VIEW_WIDGETS))


def eta_state(temperature):
    """eta means nothing at temperature 0 (greedy verification): the slider is off there, and says why."""
    if isinstance(temperature, (int, float)) and temperature > 0:
        return gr.update(interactive=True, info="")
    return gr.update(value=0.0, interactive=False,
                     info="off at temperature 0: verification is greedy there and p_hat needs a temperature")


def on_node(lab, node_id):
    return (lab or Lab()).distribution(node_id)


def param_visibility(method: str):
    """Show the chosen method's parameters only."""
    own = {p.name for p in METHODS[method].params} if isinstance(method, str) and method in METHODS else set()
    return [gr.update(visible=p.name in own) for p in PARAMS]


def param_input(p):
    label = f"{p.name}: {p.help}"
    visible = p in METHODS[DEFAULT_METHOD].params
    if p.choices:
        return gr.Dropdown(list(p.choices), value=p.default, label=label, visible=visible, elem_id=f"param-{p.name}")
    return gr.Slider(p.low, p.high, value=p.default, step=1 if p.kind is int else 0.01, label=label, visible=visible,
                     elem_id=f"param-{p.name}")


def _visitor(request, obj):
    """Note whose session holds obj, so that its KV caches are freed when that session disconnects
    (Gradio keeps a disconnected session's state for an hour)."""
    visitors.register(getattr(request, "session_hash", None), obj)
    return obj


def _failed(lab: Lab | None, error: Exception):
    """Bad input: show the message, keep the session (and what it generated) as it was."""
    lab = lab or Lab()
    lab.fail(error)
    return _shown(lab)


def on_step(request: gr.Request, lab, max_new_tokens, **settings):
    """One step: a draft tree, verified. Named parameters: max_new_tokens, the settings (model, draft_model,
    mode, prompt, method, auto_budget, budget, temperature, top_p, seed) and any method parameter by its name."""
    lab = _visitor(request, lab or Lab())
    try:
        wanted = _request(settings, max_new_tokens)
        lab.take(wanted.settings)
        lab.step(wanted.max_new_tokens)
    except SpecvizError as error:
        return _failed(lab, error)
    return _shown(lab)


def on_run(request: gr.Request, lab, max_new_tokens, **settings):
    """Steps to max_new_tokens or EOS, shown as they come (the same named parameters as /step)."""
    lab = _visitor(request, lab or Lab())
    try:
        wanted = _request(settings, max_new_tokens)
        lab.take(wanted.settings)
        for _ in lab.run(wanted.max_new_tokens):
            yield _shown(lab)
    except SpecvizError as error:
        yield _failed(lab, error)


def on_stop(lab):
    lab = lab or Lab()
    lab.stop()
    return _shown(lab)


def on_reset(lab):
    lab = lab or Lab()
    lab.reset()
    return _shown(lab)


def on_head_status(name):
    """Where the draft head of the page's model stands (the app trains a missing one in the background); the
    timer keeps asking while it trains."""
    from specviz.runtime.shared import loaded, model_key

    if not isinstance(name, str) and name is not None:
        return "", gr.Timer(active=False)
    key = model_key(name)
    lm = next((shared_model(k[1], k[2]) for k in loaded("model") if k[1] == key), None)
    if lm is None:
        return "", gr.Timer(active=True)  # the model is still loading
    state = head_training.status(lm)
    return POLICY.shown(state.message), gr.Timer(active=state.state == "training")


def on_load_model(name, mode=""):
    from specviz.runtime.modes import parse_mode, settled_here

    try:
        name = POLICY.check_model(text_value("model", name, MAX_NAME_CHARS))
        mode = POLICY.check_mode(text_value("mode", mode, MAX_NAME_CHARS))
        lm = shared_model(name, mode)
    except SpecvizError as error:
        return POLICY.shown(f"⚠️ {error}")
    notes = [*parse_mode(mode).notes, *settled_here(mode)[1]]
    return POLICY.shown(lm.description() + "".join(f" ⚠️ {note}" for note in notes))


# ---- timeline, play, linked views ---------------------------------------------------------------------
def on_go(lab, delta):
    lab = lab or Lab()
    try:
        lab.go(whole_number("delta", delta, -1_000_000, 1_000_000))
    except SpecvizError as error:
        return _failed(lab, error)
    return _shown(lab)


def on_go_to(lab, step):
    lab = lab or Lab()
    try:
        lab.go_to(whole_number("step", step, 0, 10_000_000))
    except SpecvizError as error:
        return _failed(lab, error)
    return _shown(lab)


def on_token(lab, evt: gr.EventData):
    lab = lab or Lab()
    token = getattr(evt, "token", None) if evt is not None else None
    lab.select_token(token if isinstance(token, int) and not isinstance(token, bool) else None)
    return _shown(lab)


def on_play(lab, pace):
    lab = lab or Lab()
    try:  # the pace slider's range: a timer of 0 s would tick as fast as the server answers
        pace_s = number_in("pace (seconds per step)", pace, 0.2, 5.0)
    except SpecvizError as error:
        return (*_failed(lab, error), gr.Timer(active=False))
    if not lab.play():  # already playing: the timer runs on at its pace
        return (*_shown(lab), gr.Timer(active=True))
    return (*_shown(lab), gr.Timer(value=pace_s, active=True))


def on_pause(lab):
    lab = lab or Lab()
    lab.pause()
    return (*_shown(lab), gr.Timer(active=False))


def on_tick(lab, max_new_tokens, **settings):
    lab = lab or Lab()
    if not lab.playing:
        return (*_shown(lab), gr.Timer(active=False))
    try:
        if lab.follows_live_run:  # a live step uses the page's settings, through the same door as Step
            wanted = _request(settings, max_new_tokens)
            lab.take(wanted.settings)
            limit = wanted.max_new_tokens
        else:
            limit = POLICY.check_new_tokens(max_new_tokens)
        going = lab.tick(limit)
    except SpecvizError as error:
        return (*_failed(lab, error), gr.Timer(active=False))
    return (*_shown(lab), gr.Timer(active=going))


# ---- replay and export --------------------------------------------------------------------------------
def on_replay_shipped(lab, name):
    lab = lab or Lab()
    try:
        if not isinstance(name, str) or name not in TRACES:
            raise SpecvizError(f"No shipped trace named {quoted(name)}; the shipped ones: {', '.join(TRACES)}.")
        lab.load_trace(TRACES[name], name)
    except SpecvizError as error:
        return _failed(lab, error)
    return _shown(lab)


def on_upload(lab, path):
    lab = lab or Lab()
    if not path:
        return _shown(lab)
    try:
        if not isinstance(path, str):
            raise SpecvizError("Upload a trace file (JSON).")
        POLICY.check_upload(os.path.getsize(path))
        lab.load_trace(path)
    except OSError:
        return _failed(lab, SpecvizError("That upload could not be read: upload the trace file again."))
    except SpecvizError as error:
        return _failed(lab, error)
    return _shown(lab)


def on_first_view(lab, compare, request: gr.Request):
    """A new visitor: the shipped trace plays from its first step at once (no model needed) until the visitor
    touches the page; the session's objects are registered so that closing the tab frees them (on_close)."""
    lab, compare = lab or Lab(), compare or Compare()
    open_first_visit(lab, TRACES.get(FIRST_TRACE), FIRST_TRACE)
    visitors.register(getattr(request, "session_hash", None), lab, compare)
    return (*_shown(lab), compare, gr.Timer(value=FIRST_PACE_S, active=lab.autoplay))


def on_live_status():
    """The start-up line: live steps warming up, or ready (the timer stops once they are)."""
    from specviz.lab.startup import STATUS

    return POLICY.shown(STATUS.markdown()), gr.Timer(active=not (STATUS.ready or STATUS.error))


def on_close(request: gr.Request):
    visitors.release(getattr(request, "session_hash", None))


def on_download_trace(request: gr.Request, lab):
    lab = lab or Lab()
    try:
        return _kept(request, lab.export_trace(str(_download_folder(request))))
    except SpecvizError as error:
        raise gr.Error(POLICY.shown(str(error)))


def on_download_svg(request: gr.Request, lab):
    lab = lab or Lab()
    record, token_text = lab.shown_record()
    if record is None:
        raise gr.Error("No step to export yet: Step, Run or load a trace first.")
    path = write_tree_svg(record, _download_folder(request) / f"specviz-tree-step{record.step}.svg",
                          token_text=token_text)
    return _kept(request, str(path))


def _download_folder(request: gr.Request | None) -> Path:
    """The visitor's own folder for downloads (removed when the session is released)."""
    return visitors.files_folder(getattr(request, "session_hash", None))


def _kept(request: gr.Request | None, path: str) -> str:
    """path, after the visitor's folder was cut back to its size limit (oldest files first)."""
    visitors.keep_within(_download_folder(request), POLICY.max_session_files_bytes)
    return path


def on_accounting(lab):
    view = (lab or Lab()).accounting()
    return tuple(getattr(view, name) for name in AccountingView.names())


def _compare_shown(compare: Compare):
    view = compare.view()
    return (compare, *(POLICY.shown(getattr(view, name)) if name == "message" else getattr(view, name)
                       for name in CompareView.names()))


# ---- A/B, presets, URL ----------------------------------------------------------------------------------
def on_ab_step(request: gr.Request, compare, side_a, side_b, max_new_tokens, **settings):
    """Both sides one step: the page's settings (named as for /step) with each side's overrides."""
    compare = _visitor(request, compare or Compare())
    try:
        wanted = _request(settings, max_new_tokens)
        compare.apply(wanted, side_a, side_b, POLICY)
        compare.step(wanted.max_new_tokens)
    except SpecvizError as error:
        compare.fail(error)
    return _compare_shown(compare)


def on_ab_run(request: gr.Request, compare, side_a, side_b, max_new_tokens, **settings):
    """Both sides to the end, shown as they come."""
    compare = _visitor(request, compare or Compare())
    try:
        wanted = _request(settings, max_new_tokens)
        compare.apply(wanted, side_a, side_b, POLICY)
        for _ in compare.run(wanted.max_new_tokens):
            yield _compare_shown(compare)
    except SpecvizError as error:
        compare.fail(error)
        yield _compare_shown(compare)


def on_ab_reset(compare):
    compare = compare or Compare()
    compare.reset()
    return _compare_shown(compare)


def on_preset(name):
    """A preset's settings into the page's widgets, its A/B sides and its question."""
    preset = PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:
        return [gr.update()] * (7 + len(PARAMS))
    values = {**{p.name: p.default for p in PARAMS}, **preset.params}
    return [EXAMPLES[preset.example], preset.method, preset.temperature, preset.max_new_tokens, preset.side_a,
            preset.side_b, f"**{preset.name}.** {preset.question} Press **Run both** in *A/B compare*.",
            *[gr.update(value=values[p.name], visible=p in METHODS[preset.method].params) for p in PARAMS]]


def on_paper_settings(method: str, which: str):
    """The paper's configuration of the method (which="paper") or our tuned default ("ours") into the widgets."""
    if not isinstance(method, str) or method not in METHODS:
        method = DEFAULT_METHOD
    values = widget_values(method, which, {p.name: p.default for p in PARAMS})
    budget = values["budget"]
    return [gr.update(value=budget == "auto"), gr.update() if budget == "auto" else gr.update(value=budget),
            gr.update(value=values["temperature"]), gr.update(value=values["top_p"]),
            *(gr.update(value=values[p.name]) if p.name in values else gr.update() for p in PARAMS)]


def _param_update(p, settings: dict):
    """A parameter widget's update from a link's settings. Visibility changes only when the link names a
    method: this runs after the page has loaded, and on a busy server a visitor may already have picked
    another method, whose parameters must stay shown."""
    update = {"value": settings[p.name]} if p.name in settings else {}
    if "method" in settings:
        update["visible"] = p in METHODS[settings["method"]].params
    return gr.update(**update)


def on_url(lab, request: gr.Request):
    """Settings from the page URL's query parameters; what cannot be used is named in the message (kept in the
    session's lab, so the first visit's Play ticks, which redraw the message, keep showing it)."""
    query = dict(request.query_params) if request is not None else {}
    settings, notes = POLICY.link_settings(*settings_from_query(query, EXAMPLES))
    method = settings.get("method", DEFAULT_METHOD)
    prompt = EXAMPLES[settings["example"]] if "example" in settings else settings.get("prompt")
    budget = settings.get("budget")
    updates = [gr.update(value=method) if "method" in settings else gr.update(),
               gr.update(value=settings["example"]) if "example" in settings else gr.update(),
               gr.update(value=prompt) if prompt is not None else gr.update(),
               gr.update(value=budget == "auto") if budget is not None else gr.update(),
               gr.update(value=budget) if isinstance(budget, int) else gr.update(),
               *(gr.update(value=settings[k]) if k in settings else gr.update()
                 for k in ("max_new_tokens", "temperature", "top_p", "seed")),
               *(_param_update(p, settings) for p in PARAMS)]
    restored = [k for k in settings]
    message = ""
    if restored:
        message = f"Settings from the link: {', '.join(restored)}."
    if notes:
        message += " ⚠️ Ignored: " + "; ".join(notes) + "."
    if message and lab is not None:
        lab.message = message.strip()
    return [*updates, message.strip() or gr.update()]


def on_share(max_new_tokens, **settings):
    """A link to the page with these settings (the same named parameters as /step)."""
    try:
        wanted = _request(settings, max_new_tokens)
    except SpecvizError as error:
        return POLICY.shown(f"⚠️ {error}")
    chosen, sampling = wanted.settings, wanted.settings.sampling
    example = next((label for label, text in EXAMPLES.items() if text == chosen.prompt), None)
    query = query_from_settings(chosen.method, chosen.budget, wanted.max_new_tokens, sampling.temperature,
                                sampling.top_p, sampling.seed, dict(chosen.params), example)
    note = "" if example else " (the prompt is not an example, so the link leaves it out)"
    return f"Link to these settings: [{query}]({query}){note}"


# ---- sweeps ------------------------------------------------------------------------------------------
SUITE = load_suite(ASSETS / "suite.jsonl")
CATEGORIES = sorted({item["category"] for item in SUITE})
SWEEP_METRICS = [("speedup vs ar", "speedup"), ("mean accepted per step (MAT)", "mat"),
                 ("tokens/s", "tokens_per_s"), ("share of tokens differing from the lossless output",
                                                "differing_fraction")]


def on_sweep(visit: gr.Request, axis_1, axis_2, scope, category, sweep_tokens, metric, max_new_tokens,
             progress=gr.Progress(), **settings):
    """A grid over one or two axes (axis_1, axis_2: NAME=V1,V2,...) on the page's prompt or a suite category
    (scope, category), sweep_tokens new tokens per run, with the page's other settings (named as for /step)."""
    from specviz.engine.sweep_grid import format_grid, grid_csv, grid_figure, parse_axes, runs_needed

    try:
        axes = parse_axes([text_value("axis 1", axis_1, MAX_AXIS_CHARS), text_value("axis 2", axis_2, MAX_AXIS_CHARS)])
        limit = POLICY.max_sweep_tokens or MAX_TOKENS_PRIVATE
        sweep_tokens = whole_number("new tokens per run", sweep_tokens, 1, limit)
        wanted = _request(settings, max_new_tokens)
        if scope == "suite category":
            # a suite item's own token count gives way to the sweep's: the limit is the sweep's
            prompts = [{k: v for k, v in item.items() if k != "max_new_tokens"} for item in SUITE
                       if isinstance(category, str) and item["category"] == category]
            if not prompts:
                raise SpecvizError(f"No suite prompts in category {quoted(category)}; the categories: "
                                   f"{', '.join(CATEGORIES)}.")
        elif scope == "page prompt":
            prompts = [{"id": "page prompt", "category": "prompt",
                        "prompt": Lab.checked_prompt(wanted.settings.prompt)}]
        else:
            raise SpecvizError(f"scope must be 'page prompt' or 'suite category', got {quoted(scope)}.")
        chosen = wanted.settings
        params = dict(chosen.params)
        POLICY.check_sweep(runs_needed(chosen.method, axes, params, chosen.budget, chosen.sampling, len(prompts)),
                           sweep_tokens)
        sweep = SweepRequest(model=chosen.model, mode=chosen.mode, draft_model=chosen.draft_model,
                             method=chosen.method, prompts=tuple(prompts), axes=tuple(axes),
                             max_new_tokens=sweep_tokens, params=tuple(sorted(params.items())),
                             budget=chosen.budget, sampling=chosen.sampling)
        report = model_calls.reported(ModelCall("sweep", (), sweep_tokens, sweep=sweep),
                              lambda done, total, label: progress((done, total), desc=label))
    except SpecvizError as error:
        return None, gr.update(), None, "", POLICY.shown(f"⚠️ {error}")
    path = _download_folder(visit) / f"specviz-sweep-{chosen.method}.csv"
    path.write_text(grid_csv(report))
    metric = metric if metric in dict(SWEEP_METRICS).values() else "speedup"
    return (report, grid_figure(report, metric), _kept(visit, str(path)), f"```\n{format_grid(report)}\n```",
            f"Sweep done: {len(report['points'])} points x {len(prompts)} prompts.")


def on_sweep_metric(report, metric):
    from specviz.engine.sweep_grid import grid_figure

    if report is None or metric not in dict(SWEEP_METRICS).values():
        return gr.update()
    return grid_figure(report, metric)


def sweep_tab(settings_inputs, max_new_tokens):
    """The Sweep tab: built inside build_app's Tabs; returns nothing, wires its own events."""
    with gr.Tab("Sweep", id="tab-sweep"):
        gr.Markdown("One or two hyperparameters of the page's method (or the run settings budget, temperature, "
                    "top_p, seed) over their values, on the prompt above or a suite category, against plain `ar`. "
                    "At most 64 grid points and 400 runs. API: `/sweep` (gradio_client), CLI: "
                    "`python -m specviz sweep --vary NAME=V1,V2 [--vary NAME2=...]`.")
        with gr.Row():
            axis_1 = gr.Textbox(label="Axis 1 (NAME=V1,V2,...)", value="budget=4,16,64", elem_id="axis-1")
            axis_2 = gr.Textbox(label="Axis 2 (optional)", value="", elem_id="axis-2")
        with gr.Row():
            scope = gr.Radio(["page prompt", "suite category"], value="page prompt", label="On", elem_id="sweep-scope")
            category = gr.Dropdown(CATEGORIES, value=CATEGORIES[0], label="Suite category")
            sweep_tokens = gr.Slider(4, POLICY.max_sweep_tokens or 256, value=32, step=1, label="New tokens per run",
                                     elem_id="sweep-tokens")
            metric = gr.Dropdown(SWEEP_METRICS, value="speedup", label="Plot", elem_id="sweep-metric")
        go = gr.Button("Run sweep", variant="primary", elem_id="sweep-btn")
        sweep_message = gr.Markdown(elem_id="sweep-message")
        report = gr.State(None)
        plot = gr.Plot(elem_id="sweep-plot", label="Sweep")
        csv_file = gr.File(label="CSV (one line per grid point)", elem_id="sweep-csv")
        table = gr.Markdown(elem_id="sweep-table")
        go.click(on_sweep, [axis_1, axis_2, scope, category, sweep_tokens, metric, max_new_tokens],
                 inputs_kwargs=settings_inputs, outputs=[report, plot, csv_file, table, sweep_message], api_name="sweep",
                 concurrency_id="model", concurrency_limit=MODEL_CONCURRENCY)
        metric.change(on_sweep_metric, [report, metric], plot, api_visibility="private")


def model_widgets():
    """The model, draft model and run mode boxes: free text here; in public mode dropdowns of the allow-list,
    and no compile modes."""
    draft_label = ("Draft model of the model source (respec, reader, rapid, unified): blank = the trained draft "
                   "head when the target has one, else the target's own weights; self-skip:K = only its first K "
                   "layers (cheap, untrained)")
    mode_label = ("Run mode (precision and compile; a mode this machine cannot run falls back to fp32 eager and "
                  "says so)")
    if POLICY.public:
        model = gr.Dropdown(list(POLICY.models), value=POLICY.default_model, elem_id="model",
                            label="Model (this Space's list)")
        draft_model = gr.Dropdown(list(POLICY.drafts), value="", elem_id="draft-model",
                                  label=draft_label + "; or a model of this Space's list")
        modes = [(label, value) for label, value in RUN_MODES if "compile" not in value]
        return model, draft_model, gr.Dropdown(modes, value="", label=mode_label, elem_id="run-mode")
    model = gr.Textbox(value=os.environ.get("SPECVIZ_MODEL", DEFAULT_MODEL), elem_id="model",
                       label="Hub id or local folder (default: packaged SmolLM2-135M-Instruct)")
    draft_model = gr.Dropdown(DRAFT_MODELS, value=os.environ.get("SPECVIZ_DRAFT_MODEL", ""), allow_custom_value=True,
                              elem_id="draft-model",
                              label=draft_label + "; eagle:PATH = a published EAGLE-1/2 or EAGLE-3 head (folder or "
                                                  "hub id); or type a hub id / local folder with the target's vocabulary")
    mode = gr.Dropdown(RUN_MODES, value=os.environ.get("SPECVIZ_MODE", ""), label=mode_label, elem_id="run-mode")
    return model, draft_model, mode


def build_app() -> gr.Blocks:
    # what a new visitor sees at once: the initial values, before any event answers
    first = first_view(TRACES.get(FIRST_TRACE), FIRST_TRACE, EXAMPLES)
    shown = first.view
    with gr.Blocks(title="specviz: speculative decoding with draft trees", delete_cache=DELETE_CACHE) as demo:
        lab = gr.State(None, time_to_live=SESSION_TTL_S, delete_callback=lambda lab: lab and lab.release())
        compare = gr.State(None, time_to_live=SESSION_TTL_S, delete_callback=lambda c: c and c.release())
        # the settings: a side panel, closed at first so that the tree has the screen
        with gr.Sidebar(label="Settings", open=False, width=360, elem_id="settings-panel"):
            example = gr.Dropdown(list(EXAMPLES), label="Example prompts (from assets/suite.jsonl)",
                                  value=first.example, elem_id="example")
            prompt = gr.Textbox(label="Prompt (text, or {\"messages\": [...]} JSON for a chat)", lines=4,
                                max_lines=12, value=first.prompt, elem_id="prompt")
            method = gr.Dropdown(list(METHODS), value=DEFAULT_METHOD, label="Method", elem_id="method")
            with gr.Row(elem_id="paper-row"):
                paper_btn = gr.Button("Paper's settings", size="sm", elem_id="paper-btn")
                tuned_btn = gr.Button("Our default", size="sm", elem_id="tuned-btn")
            paper_note = gr.Markdown(paper_settings_markdown(DEFAULT_METHOD), elem_id="paper-note")
            auto_budget = gr.Checkbox(value=True, label="Budget: auto (from the measured verify cost)",
                                      elem_id="auto-budget")
            budget = gr.Slider(1, BUDGET_MAX, value=16, step=1, label="Tree budget (draft nodes per step)",
                               elem_id="budget")
            max_new_tokens = gr.Slider(1, POLICY.max_new_tokens or 1024, value=128, step=1, label="Max new tokens",
                                       elem_id="max-new-tokens")
            with gr.Accordion("Sampling", open=False):
                temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, elem_id="temperature",
                                        label="Temperature (0 = greedy; > 0 samples, verified by lossless "
                                              "speculative sampling)")
                top_p = gr.Slider(0.01, 1.0, value=1.0, step=0.01, label="Top-p (nucleus mass)", elem_id="top-p")
                seed = gr.Number(value=0, label="Seed (whole number; the same seed repeats a sampled run)",
                                 elem_id="seed")
            with gr.Accordion("Method parameters", open=False, elem_id="method-params"):
                param_inputs = [param_input(p) for p in PARAMS]
            with gr.Accordion("Presets: one click, one question", open=False):
                preset = gr.Dropdown(list(PRESETS), value=None, label="Preset", elem_id="preset")
                preset_question = gr.Markdown(elem_id="preset-question")
            with gr.Accordion("Model", open=False):
                model, draft_model, mode = model_widgets()
                head_status = gr.Markdown(elem_id="head-status")
                load = gr.Button("Load model", visible=not POLICY.public)
                model_status = gr.Markdown()
        # one bar of controls, then the stage: the tree, the text beside it
        with gr.Row(elem_id="topbar", equal_height=True):
            gr.HTML(TITLE_HTML, elem_id="brand", padding=False)
            step_btn = gr.Button("Step", variant="primary", elem_id="step-btn", scale=0, min_width=70)
            run_btn = gr.Button("Run", variant="primary", elem_id="run-btn", scale=0, min_width=70)
            stop_btn = gr.Button("Stop", elem_id="stop-btn", scale=0, min_width=70)
            reset_btn = gr.Button("Reset", elem_id="reset-btn", scale=0, min_width=70)
            prev_btn = gr.Button("◀", elem_id="prev-btn", scale=0, min_width=48)
            next_btn = gr.Button("▶", elem_id="next-btn", scale=0, min_width=48)
            play_btn = gr.Button("▶ Play", elem_id="play-btn", scale=0, min_width=86)
            pause_btn = gr.Button("Pause", elem_id="pause-btn", scale=0, min_width=76)
            present_btn = gr.Button("Present", elem_id="present-btn", scale=0, min_width=90)
        with gr.Row(elem_id="stage", equal_height=False):
            with gr.Column(scale=17, elem_id="tree-col", min_width=560):
                tree = gr.HTML(shown.tree, elem_id="tree-box", js_on_load=TREE_JS, padding=False)
            with gr.Column(scale=8, elem_id="text-col", min_width=320):
                caption = gr.Markdown(shown.caption, elem_id="step-caption")
                text = gr.HTML(shown.text_html, label="Generated text (click a token: its step and node)",
                               elem_id="generated", js_on_load=TOKEN_CLICK_JS)
                counters = gr.Markdown(shown.counters, elem_id="counters")
                live_status = gr.Markdown(elem_id="live-status")
        message = gr.Markdown(shown.message, elem_id="message")
        with gr.Row(equal_height=True, elem_id="timeline-row"):
            timeline = gr.Slider(0, max(shown.steps - 1, 1), value=shown.shown_step or 0, step=1,
                                 label="Timeline: step shown (← / → keys)", elem_id="timeline", scale=4,
                                 interactive=shown.steps > 1)
            pace = gr.Slider(0.2, 5.0, value=DEFAULT_PACE_S, step=0.1, label="Play pace (s per step)", scale=1,
                             elem_id="pace")
        timer = gr.Timer(DEFAULT_PACE_S, active=False)
        # the settings widgets by name: every event that reads them takes them as keyword inputs
        settings = {"model": model, "draft_model": draft_model, "mode": mode, "prompt": prompt, "method": method,
                    "auto_budget": auto_budget, "budget": budget, "temperature": temperature, "top_p": top_p,
                    "seed": seed, **{p.name: widget for p, widget in zip(PARAMS, param_inputs)}}
        run_inputs = {"max_new_tokens": max_new_tokens, **settings}
        with gr.Tabs(elem_id="details-tabs"):
            with gr.Tab("Step details", id="tab-tree"):
                with gr.Row():
                    with gr.Column(scale=3, min_width=360):
                        split = gr.Markdown(elem_id="budget-split")
                        method_step = gr.Markdown(elem_id="method-step")
                    with gr.Column(scale=4):
                        prediction = gr.Plot(value=prediction_figure([]), label="Predicted vs measured accepted drafts",
                                             elem_id="prediction-plot")
                diff = gr.HTML(label="Difference from the lossless output", elem_id="token-diff")
                with gr.Row():
                    with gr.Column(scale=3):
                        document = gr.HTML(label="Document (rapid: the chunks the RAG drafter reads are highlighted)",
                                           elem_id="document")
                    with gr.Column(scale=2):
                        node = gr.Dropdown([], label="Node of the shown step (sampling): p, q and p_hat at its "
                                           "position", elem_id="node-pick")
                        distribution = gr.Plot(value=distribution_figure(None, None, str), elem_id="distribution-plot",
                                               label="p (target), q (draft), p_hat (eta) and what was emitted")
                with gr.Row():
                    trace_btn = gr.DownloadButton("Download trace (JSON)", elem_id="download-trace")
                    svg_btn = gr.DownloadButton("Tree for slides (SVG, light theme)", elem_id="download-svg")
                    share_btn = gr.Button("Link to these settings", elem_id="share-btn")
                share_link = gr.Markdown(elem_id="share-link")
            with gr.Tab("Accounting", id="tab-accounting") as accounting_tab:
                refresh = gr.Button("Refresh plots", elem_id="refresh-accounting")
                with gr.Row():
                    sources_plot = gr.Plot(elem_id="sources-plot", label="Nodes per source")
                    acceptance_plot = gr.Plot(elem_id="acceptance-plot", label="Acceptance by depth and source")
                with gr.Row():
                    waste_plot = gr.Plot(elem_id="waste-plot", label="Wasted verify tokens")
                    time_plot = gr.Plot(elem_id="time-plot", label="Time split per step")
                lanes_plot = gr.Plot(elem_id="lanes-plot", label="Wall clock: this run against ar")
                cost_plot = gr.Plot(elem_id="cost-plot", label="Why a tree pays: verify cost and expected speedup")
            with gr.Tab("A/B compare", id="tab-ab"):
                gr.Markdown("Two configurations on the prompt above: each side is the page's settings with the "
                            "overrides you write (`method=respec tau=3`, `budget=64`, `temperature=0.8`, ...).")
                with gr.Row():
                    side_a = gr.Textbox(label="Side A overrides", elem_id="side-a", value="")
                    side_b = gr.Textbox(label="Side B overrides", elem_id="side-b", value="method=pld")
                with gr.Row():
                    ab_step = gr.Button("Step both", elem_id="ab-step", variant="primary")
                    ab_run = gr.Button("Run both to the end", elem_id="ab-run", variant="primary")
                    ab_reset = gr.Button("Reset both", elem_id="ab-reset")
                ab_message = gr.Markdown(elem_id="ab-message")
                with gr.Row():
                    with gr.Column():
                        summary_a = gr.Markdown(elem_id="summary-a")
                        tree_a = gr.HTML(elem_id="tree-a", label="A: tree of the last step", js_on_load=TREE_JS)
                        text_a = gr.HTML(elem_id="text-a")
                    with gr.Column():
                        summary_b = gr.Markdown(elem_id="summary-b")
                        tree_b = gr.HTML(elem_id="tree-b", label="B: tree of the last step", js_on_load=TREE_JS)
                        text_b = gr.HTML(elem_id="text-b")
                ab_diff = gr.HTML(elem_id="ab-diff")
            with gr.Tab("Replay", id="tab-replay"):
                gr.Markdown("Recorded runs replay with **no model loaded**: pick a shipped trace or upload one "
                            f"(a specviz trace JSON, at most {MAX_TRACE_MB} MB). Step or Run returns to your live run.")
                with gr.Row():
                    shipped = gr.Dropdown(list(TRACES), value=FIRST_TRACE, label="Shipped traces (assets/traces)",
                                          elem_id="shipped-trace")
                    replay_btn = gr.Button("Replay", elem_id="replay-btn")
                upload = gr.File(label="Upload a trace", file_types=[".json"], elem_id="upload-trace")
            sweep_tab(settings, max_new_tokens)
            StaticTreeTab(POLICY, {"tuning suite": SUITE, "held-out suite": load_suite(ASSETS / "heldout.jsonl")},
                          settings, max_new_tokens)
        live_timer = gr.Timer(2.0, active=True)

        view_widgets = {"tree": tree, "text_html": text, "counters": counters, "budget_split": split,
                        "method_step": method_step, "token_diff_html": diff, "prediction": prediction,
                        "message": message, "document_html": document, "node_choices": node,
                        "distribution": distribution, "timeline": timeline, "caption": caption}
        outputs = [lab, *(view_widgets[name] for name in VIEW_WIDGETS)]
        accounting_widgets = {"sources": sources_plot, "acceptance": acceptance_plot, "waste": waste_plot,
                              "time_split": time_plot, "lanes": lanes_plot, "cost": cost_plot}
        plots = [accounting_widgets[name] for name in AccountingView.names()]
        compare_widgets = {"tree_a": tree_a, "tree_b": tree_b, "text_a": text_a, "text_b": text_b,
                           "summary_a": summary_a, "summary_b": summary_b, "diff_html": ab_diff,
                           "message": ab_message}
        ab_outputs = [compare, *(compare_widgets[name] for name in CompareView.names())]
        model_events = dict(concurrency_id="model", concurrency_limit=MODEL_CONCURRENCY)
        private = dict(api_visibility="private")  # page plumbing: no API endpoint
        method.change(param_visibility, method, param_inputs, **private)
        method.change(lambda m: paper_settings_markdown(m) if isinstance(m, str) and m in METHODS else "", method,
                      paper_note, **private)
        paper_outputs = [auto_budget, budget, temperature, top_p, *param_inputs]
        paper_btn.click(lambda m: on_paper_settings(m, "paper"), method, paper_outputs, **private)
        tuned_btn.click(lambda m: on_paper_settings(m, "ours"), method, paper_outputs, **private)
        present_btn.click(None, js=PRESENT_JS, **private)
        eta = next(widget for p, widget in zip(PARAMS, param_inputs) if p.name == "eta")
        temperature.change(eta_state, temperature, eta, **private)
        demo.load(eta_state, temperature, eta, **private)
        # the shipped trace first, then the URL's settings (their message must come last)
        demo.load(on_first_view, [lab, compare], [*outputs, compare, timer], **private).then(
            on_url, lab, [method, example, prompt, auto_budget, budget, max_new_tokens, temperature, top_p, seed,
                           *param_inputs, message], api_name="url_settings", **private)
        demo.unload(on_close)
        head_timer = gr.Timer(HEAD_STATUS_EVERY_S, active=False)
        demo.load(on_head_status, model, [head_status, head_timer], **private)
        head_timer.tick(on_head_status, model, [head_status, head_timer], **private)
        demo.load(on_live_status, None, [live_status, live_timer], **private)
        live_timer.tick(on_live_status, None, [live_status, live_timer], **private)
        node.input(on_node, [lab, node], distribution, **private)
        example.change(lambda label: EXAMPLES.get(label, "") if isinstance(label, str) else "", example, prompt,
                       api_name="example")
        step_btn.click(on_step, [lab], outputs, inputs_kwargs=run_inputs, api_name="step", **model_events)
        run_event = run_btn.click(on_run, [lab], outputs, inputs_kwargs=run_inputs, api_name="run", **model_events)
        run_event.then(on_accounting, lab, plots, **private)
        stop_btn.click(on_stop, lab, outputs, cancels=[run_event], api_name="stop")
        reset_btn.click(on_reset, lab, outputs, api_name="reset")
        load.click(on_load_model, [model, mode], model_status, api_name="load_model",
                   api_visibility="private" if POLICY.public else "public", **model_events)
        # timeline
        prev_btn.click(on_go, [lab, gr.Number(-1, visible=False)], outputs, api_name="previous")
        next_btn.click(on_go, [lab, gr.Number(1, visible=False)], outputs, api_name="next")
        timeline.release(on_go_to, [lab, timeline], outputs, api_name="go_to")
        text.click(on_token, lab, outputs, **private)
        play_btn.click(on_play, [lab, pace], [*outputs, timer], api_name="play")
        pause_btn.click(on_pause, lab, [*outputs, timer], api_name="pause")
        timer.tick(on_tick, [lab], [*outputs, timer], inputs_kwargs=run_inputs, **private, **model_events)
        # replay, export, share
        replay_btn.click(on_replay_shipped, [lab, shipped], outputs, api_name="replay")
        upload.upload(on_upload, [lab, upload], outputs, api_name="upload_trace")
        trace_btn.click(on_download_trace, lab, trace_btn, api_name="download_trace")
        svg_btn.click(on_download_svg, lab, svg_btn, api_name="download_svg")
        share_btn.click(on_share, None, share_link, inputs_kwargs=run_inputs, api_name="share_link")
        # accounting
        refresh.click(on_accounting, lab, plots, api_name="accounting")
        accounting_tab.select(on_accounting, lab, plots, **private)
        # A/B and presets
        ab_step.click(on_ab_step, [compare, side_a, side_b], ab_outputs, inputs_kwargs=run_inputs,
                      api_name="ab_step", **model_events)
        ab_run.click(on_ab_run, [compare, side_a, side_b], ab_outputs, inputs_kwargs=run_inputs,
                     api_name="ab_run", **model_events)
        ab_reset.click(on_ab_reset, compare, ab_outputs, api_name="ab_reset")
        preset.input(on_preset, preset, [prompt, method, temperature, max_new_tokens, side_a, side_b,
                                         preset_question, *param_inputs], api_name="preset")
    return demo


def main() -> None:
    global POLICY
    parser = argparse.ArgumentParser(description="specviz app")
    # a Hugging Face Space (SPACE_ID set) routes traffic to 0.0.0.0; everywhere else stay on loopback
    default_host = "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"
    parser.add_argument("--host", default=os.environ.get("SPECVIZ_HOST", default_host))
    parser.add_argument("--port", type=int, default=int(os.environ.get("SPECVIZ_PORT", "7860")))
    parser.add_argument("--public", action="store_true",
                        help="public mode (on by itself when SPACE_ID is set): an allow-list of models and limits")
    args = parser.parse_args()
    from specviz.runtime.shared import set_model_slots
    from specviz.runtime.threads import follow_cpu_quota
    from specviz.lab import startup

    follow_cpu_quota()  # threads from the container's CPU quota, not the host's count
    POLICY = Policy.from_environment(args.public)
    model = POLICY.default_model or os.environ.get("SPECVIZ_MODEL", "")
    if model_calls.zero_gpu():  # the allowed models on cuda now, on the main thread (spaces lends the GPU per call)
        startup.place_models(list(POLICY.models) or [model])
    elif POLICY.model_slots:
        set_model_slots(POLICY.model_slots)
    LIVE.limit, LIVE.token_limit = POLICY.max_live_sessions, POLICY.max_live_tokens
    # the page is up at once (a shipped trace replays) while the model loads and warms up
    startup.start_in_background(model, EXAMPLES[next(iter(EXAMPLES))], DEFAULT_METHOD, model_calls.zero_gpu())
    launch = dict(LAUNCH_OPTIONS)
    if POLICY.max_upload_bytes:
        launch["max_file_size"] = POLICY.max_upload_bytes
    build_app().queue(default_concurrency_limit=8, max_size=POLICY.max_queue).launch(server_name=args.host, server_port=args.port, **launch)


if __name__ == "__main__":
    main()
