"""The Sweep tab: one or two hyperparameters of the page's method (or the run settings) over their values, on the
page's prompt or a suite category, against plain `ar` (lab.sweep.Sweep), drawn as a heatmap or a line
(render.sweep_figures), with a CSV and a table. The API's /sweep takes axis_1, axis_2, scope, category,
sweep_tokens, metric, max_new_tokens and the page's settings by name (as /step), and answers the plot, the
CSV, the table and a message."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr

from specviz.studies.sweep_grid import MAX_SWEEP_POINTS, MAX_SWEEP_RUNS, METRICS
from specviz.lab.model_calls import call_tokens
from specviz.lab.sweep import SCOPES, Sweep
from specviz.lab.visitor_request import VisitorRequest
from specviz.panels.visitor_handler import download_folder, model_call, trim_downloads, visitor_handler

if TYPE_CHECKING:
    from specviz.panels.page_context import PageContext

# the Plot dropdown: label -> studies.sweep_grid.METRICS key
METRIC_CHOICES = [("speedup vs ar", "speedup"), ("mean accepted per step (MAT)", "mat"), ("tokens/s", "tokens_per_s"),
                  ("share of tokens differing from the lossless output", "differing_fraction")]
DEFAULT_METRIC = "speedup"
MAX_TOKENS = 256   # the tokens slider's top where no public limit applies
# /sweep's answer to an API caller, in this order (the visitor's Sweep state is not sent): SweepTab's widgets
SWEEP_FIELDS = ("plot", "csv_file", "table", "message")


def _metric(metric) -> str | None:
    """A metric the Plot dropdown offers, or None."""
    return metric if isinstance(metric, str) and metric in METRICS else None


def _refused(tab: "SweepTab", _, error) -> dict:
    """The plot stays; the last sweep's CSV and table go."""
    return {tab.sweep: None, tab.csv_file: None, tab.table: "", tab.message: tab.policy.shown(f"⚠️ {error}")}


class SweepTab:
    """Built inside the page's Tabs. context: the page's PageContext (its policy, its tuning suite, the model
    events' queue); `settings_inputs` are the page's settings widgets by name (as /step takes them)."""

    def __init__(self, context: "PageContext", settings_inputs: dict, max_new_tokens):
        self.policy, self.suite = context.policy, tuple(context.tuning_suite)
        categories = Sweep(self.policy, self.suite).categories
        with gr.Tab("Sweep", id="tab-sweep"):
            gr.Markdown("One or two hyperparameters of the page's method (or the run settings budget, temperature, "
                        "top_p, seed) over their values, on the prompt above or a suite category, against plain `ar`. "
                        f"At most {MAX_SWEEP_POINTS} grid points and {MAX_SWEEP_RUNS} runs. API: `/sweep` "
                        "(gradio_client), CLI: `python -m specviz sweep --vary NAME=V1,V2 [--vary NAME2=...]`.")
            with gr.Row():
                self.axis_1 = gr.Textbox(label="Axis 1 (NAME=V1,V2,...)", value="budget=4,16,64", elem_id="axis-1")
                self.axis_2 = gr.Textbox(label="Axis 2 (optional)", value="", elem_id="axis-2")
            with gr.Row():
                self.scope = gr.Radio(list(SCOPES), value=SCOPES[0], label="On", elem_id="sweep-scope")
                self.category = gr.Dropdown(categories, value=categories[0] if categories else None,
                                            label="Suite category")
                self.tokens = gr.Slider(4, self.policy.max_sweep_tokens or MAX_TOKENS, value=32, step=1,
                                        label="New tokens per run", elem_id="sweep-tokens")
                self.metric = gr.Dropdown(METRIC_CHOICES, value=DEFAULT_METRIC, label="Plot", elem_id="sweep-metric")
            go = gr.Button("Run sweep", variant="primary", elem_id="sweep-btn")
            self.message = gr.Markdown(elem_id="sweep-message")
            self.sweep = gr.State(None)  # the visitor's Sweep, holding its last report
            self.plot = gr.Plot(elem_id="sweep-plot", label="Sweep")
            self.csv_file = gr.File(label="CSV (one line per grid point)", elem_id="sweep-csv")
            self.table = gr.Markdown(elem_id="sweep-table")
        go.click(self.on_sweep, [self.axis_1, self.axis_2, self.scope, self.category, self.tokens, self.metric,
                                 max_new_tokens],
                 inputs_kwargs=settings_inputs, outputs=[self.sweep, *(getattr(self, name) for name in SWEEP_FIELDS)],
                 api_name="sweep", **context.model_events)
        self.metric.change(self.on_metric, [self.sweep, self.metric], self.plot, api_visibility="private")

    # ---- events -----------------------------------------------------------------------------------------
    @visitor_handler(_refused)
    def on_sweep(self, visit: gr.Request, axis_1, axis_2, scope, category, sweep_tokens, metric, max_new_tokens,
                 progress=gr.Progress(), **settings):
        """A grid over one or two axes (axis_1, axis_2: NAME=V1,V2,...) on the page's prompt or a suite category
        (scope, category), sweep_tokens new tokens per run, with the page's other settings (named as for /step).
        Bad input answers a sentence in the message, and the plot stays."""
        request = VisitorRequest.from_inputs(settings, max_new_tokens, self.policy)
        sweep = Sweep(self.policy, self.suite)
        planned = sweep.plan(request, scope, category, (axis_1, axis_2), sweep_tokens)
        with model_call(visit, call_tokens(Sweep.call_of(planned))) as budget:
            sweep.run_planned(planned, lambda event: progress((event.done, event.total), desc=event.label), budget)
        path = trim_downloads(visit, sweep.write_csv(download_folder(visit)), self.policy)
        return {self.sweep: sweep, self.plot: sweep.figure(_metric(metric) or DEFAULT_METRIC), self.csv_file: path,
                self.table: sweep.table_markdown(), self.message: sweep.message}

    def on_metric(self, sweep, metric):
        """The last sweep's plot of another metric (nothing changes without a sweep or for an unknown metric)."""
        if not isinstance(sweep, Sweep) or sweep.report is None or _metric(metric) is None:
            return gr.update()
        return sweep.figure(metric)
