"""The Accounting tab: where a run's budget went up to the shown step (nodes per source, acceptance by depth
and source, wasted verify tokens, the time split), its wall clock against ar, and why a tree pays."""

from __future__ import annotations

import gradio as gr

from specviz.lab.lab import Lab
from specviz.panels.visitor_handler import visitor_handler
from specviz.render.session_view import accounting_view
from specviz.render.views import AccountingView


def _refused(tab: "AccountingTab", _, error) -> dict:
    """The plots' answer has no message: a refusal is the page's error toast (the sentence alone)."""
    raise gr.Error(str(error)) from None


class AccountingTab:
    def __init__(self):
        with gr.Tab("Accounting", id="tab-accounting") as self.tab:
            self.refresh = gr.Button("Refresh plots", elem_id="refresh-accounting")
            with gr.Row():
                sources = gr.Plot(elem_id="sources-plot", label="Nodes per source")
                acceptance = gr.Plot(elem_id="acceptance-plot", label="Acceptance by depth and source")
            with gr.Row():
                waste = gr.Plot(elem_id="waste-plot", label="Wasted verify tokens")
                time_split = gr.Plot(elem_id="time-plot", label="Time split per step")
            lanes = gr.Plot(elem_id="lanes-plot", label="Wall clock: this run against ar")
            cost = gr.Plot(elem_id="cost-plot", label="Why a tree pays: verify cost and expected speedup")
        # AccountingView's fields, each its plot (the API answers in AccountingView's order)
        self.plots = {"sources": sources, "acceptance": acceptance, "waste": waste, "time_split": time_split,
                      "lanes": lanes, "cost": cost}
        self.outputs = [self.plots[name] for name in AccountingView.names()]

    def wire(self, lab: gr.State) -> None:
        self.refresh.click(self.on_accounting, lab, self.outputs, api_name="accounting")
        self.tab.select(self.on_accounting, lab, self.outputs, api_visibility="private")

    def after(self, event, lab: gr.State) -> None:
        """Redraw the plots once event (a finished run) is done."""
        event.then(self.on_accounting, lab, self.outputs, api_visibility="private")

    @visitor_handler(_refused, session=Lab)
    def on_accounting(self, request: gr.Request, lab) -> dict:
        view = accounting_view(lab.on_screen())
        return {self.plots[name]: getattr(view, name) for name in AccountingView.names()}
