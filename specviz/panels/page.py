"""The page, composed: the settings side panel, the stage, then the tabs (step details, accounting, A/B,
replay, sweep, static tree), each panel building its widgets and wiring its own events. What a new visitor
sees first (a shipped trace at its first step) is the widgets' initial value, so a tree is on screen at once."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import gradio as gr

from specviz.lab import visitors
from specviz.lab.fair_share import SHARE
from specviz.lab.first_visit import first_view
from specviz.lab.lab import Lab
from specviz.panels.accounting_tab import AccountingTab
from specviz.panels.compare_tab import CompareTab
from specviz.panels.lab_outputs import LabOutputs
from specviz.panels.page_context import MODEL_QUEUE, PAGE_CONCURRENCY, PAGE_QUEUE, PageContext
from specviz.panels.replay_tab import ReplayTab
from specviz.panels.settings_panel import SettingsPanel
from specviz.panels.stage import Stage
from specviz.panels.static_tree_tab import StaticTreeTab
from specviz.panels.step_details_tab import StepDetailsTab
from specviz.panels.sweep_tab import SweepTab
from specviz.panels.visitor_gate import VisitorGate
from specviz.render.page_style import PAGE_CSS, PAGE_JS
from specviz.render.session_view import live_counters

TITLE = "specviz: speculative decoding with draft trees"
NO_PROXY = "none"  # a FORWARDED_ALLOW_IPS that no peer matches: uvicorn leaves the connection's peer as it is
LAUNCH_OPTIONS = {"css": PAGE_CSS, "js": PAGE_JS}
# Gradio's cache of files handed to browsers (downloads): swept every 15 minutes of what is over an hour old
DELETE_CACHE = (900, 3600)


@dataclass(frozen=True)
class Page:
    blocks: gr.Blocks
    settings: SettingsPanel
    stage: Stage
    details: StepDetailsTab
    accounting: AccountingTab
    compare: CompareTab
    replay: ReplayTab
    sweep: SweepTab
    static_tree: StaticTreeTab
    out: LabOutputs          # the lab state and the widgets that show it


def launch_options(page: "Page") -> dict:
    """Gradio's launch options for the page: its CSS and script, the policy's upload limit and the door in front
    of every route (panels.visitor_gate). In public mode also: Gradio's session store bounded (its capacity),
    Gradio's features this Space does not offer off (monitoring, run history, the MCP server, server-side
    rendering, whose Node server would stand between visitors and the door), and uvicorn told to trust no proxy
    header: the door reads the visitor's address itself (lab.visitor_address)."""
    from starlette.middleware import Middleware

    policy = page.settings.policy
    options = dict(LAUNCH_OPTIONS)
    if policy.max_upload_bytes:
        options["max_file_size"] = policy.max_upload_bytes
    options["app_kwargs"] = {"middleware": [Middleware(VisitorGate, blocks=page.blocks, share=SHARE,
                                                       policy=policy)]}
    if policy.public:
        options.update(enable_monitoring=False, run_history=False, mcp_server=False, ssr_mode=False)
        if policy.max_gradio_sessions:
            options["state_session_capacity"] = policy.max_gradio_sessions
        os.environ["FORWARDED_ALLOW_IPS"] = NO_PROXY  # read by uvicorn when the server starts
    return options


def counters_data(lab) -> dict | None:
    """The counters the stage shows (render.counters.LabCounters), as data for API callers and tests (no Markdown
    to parse); None before a live run."""
    counters = live_counters(lab.on_screen().live) if isinstance(lab, Lab) else None
    return asdict(counters) if counters is not None else None


def build_page(context: PageContext) -> Page:
    first = first_view(context.traces.get(context.first_trace), context.first_trace, context.examples)
    with gr.Blocks(title=TITLE, delete_cache=DELETE_CACHE) as demo:
        lab = gr.State(None, time_to_live=context.session_ttl_s,
                       delete_callback=lambda lab: lab and visitors.release_holder(lab))
        settings = SettingsPanel(context, first.example, first.prompt)
        stage = Stage(context, first.view)
        with gr.Tabs(elem_id="details-tabs"):
            details = StepDetailsTab(context)
            accounting = AccountingTab()
            compare = CompareTab(context)
            replay = ReplayTab(context)
            sweep = SweepTab(context, settings.by_name, settings.max_new_tokens)
            static_tree = StaticTreeTab(context.policy, context.suites, settings.by_name, settings.max_new_tokens)
        counters = gr.JSON(visible=False)
        gr.Button(visible=False).click(counters_data, lab, counters, api_name="counters")

        out = LabOutputs(lab, {**stage.view_widgets, **details.view_widgets}, context.policy)
        settings.wire(demo, compare.side_a, compare.side_b, stage.message)
        first_visit = stage.wire(demo, out, compare.compare, settings.run_inputs,
                                 after_run=lambda event: accounting.after(event, lab))
        # the link's settings after the shipped trace (their message must come last)
        first_visit.then(settings.on_url, lab, [*settings.url_outputs, stage.message], api_name="url_settings",
                         api_visibility="private")
        details.wire(lab, settings.run_inputs)
        accounting.wire(lab)
        compare.wire(settings.run_inputs)
        replay.wire(out)
    if context.policy.public:
        share_page_events(demo, PAGE_CONCURRENCY)
    return Page(demo, settings, stage, details, accounting, compare, replay, sweep, static_tree, out)


def share_page_events(blocks: gr.Blocks, limit: int) -> None:
    """Every event outside a group of its own (the model's, the trace uploads') in one group of `limit` at once,
    before the queue is made. Gradio gives each event function a group of the default limit: under issue 73's soak
    the churn's and the page loads' events ran 8 at a time in each of theirs, 20-odd threads sharing the GIL, and an
    honest Step's half second of drawing took 9 s. One small group keeps what runs Python beside the model few; the
    queue guard serves its waiting events by address, the one served longest ago first (panels.queue_guard)."""
    for fn in blocks.fns.values():
        if fn.concurrency_limit == "default" and fn.concurrency_id != MODEL_QUEUE:
            fn.concurrency_id, fn.concurrency_limit = PAGE_QUEUE, limit
