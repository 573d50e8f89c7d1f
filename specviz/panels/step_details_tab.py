"""The Step details tab: the shown step's budget split and method notes, predicted against measured accepted
drafts, the difference from the lossless output, rapid's document, one node's p / q / p_hat, and the exports
(trace JSON, the tree as a slide SVG, a link to these settings)."""

from __future__ import annotations

import gradio as gr

from specviz.errors import SpecvizError
from specviz.lab.lab import Lab
from specviz.lab.share_link import link_for
from specviz.lab.visitor_request import VisitorRequest
from specviz.panels.page_context import PageContext
from specviz.panels.visitor_handler import download_folder, trim_downloads, visitor_handler
from specviz.render.session_view import distribution
from specviz.render.slides import write_tree_svg
from specviz.render.step_panels import distribution_figure, prediction_figure


def _refused_download(tab: "StepDetailsTab", _, error) -> str:
    """A download button's answer is a file: a refusal is the page's error toast (the sentence alone)."""
    raise gr.Error(tab.policy.shown(str(error))) from None


def _refused_text(tab: "StepDetailsTab", _, error) -> str:
    return tab.policy.shown(f"⚠️ {error}")


def _unchanged(tab: "StepDetailsTab", _, error):
    return gr.update()


class StepDetailsTab:
    def __init__(self, context: PageContext):
        self.context, self.policy = context, context.policy
        with gr.Tab("Step details", id="tab-tree"):
            with gr.Row():
                with gr.Column(scale=3, min_width=360):
                    self.split = gr.Markdown(elem_id="budget-split")
                    self.method_step = gr.Markdown(elem_id="method-step")
                with gr.Column(scale=4):
                    self.prediction = gr.Plot(value=prediction_figure([]), elem_id="prediction-plot",
                                              label="Predicted vs measured accepted drafts")
            self.diff = gr.HTML(label="Difference from the lossless output", elem_id="token-diff")
            with gr.Row():
                with gr.Column(scale=3):
                    self.document = gr.HTML(label="Document (rapid: the chunks the RAG drafter reads are "
                                                  "highlighted)", elem_id="document")
                with gr.Column(scale=2):
                    self.node = gr.Dropdown([], label="Node of the shown step (sampling): p, q and p_hat at its "
                                            "position", elem_id="node-pick")
                    self.distribution = gr.Plot(value=distribution_figure(None, None, str),
                                                elem_id="distribution-plot",
                                                label="p (target), q (draft), p_hat (eta) and what was emitted")
            with gr.Row():
                self.trace_btn = gr.DownloadButton("Download trace (JSON)", elem_id="download-trace")
                self.svg_btn = gr.DownloadButton("Tree for slides (SVG, light theme)", elem_id="download-svg")
                self.share_btn = gr.Button("Link to these settings", elem_id="share-btn")
            self.share_link = gr.Markdown(elem_id="share-link")

    @property
    def view_widgets(self) -> dict:
        """The LabView fields this tab shows, by name."""
        return {"budget_split": self.split, "method_step": self.method_step, "token_diff_html": self.diff,
                "prediction": self.prediction, "document_html": self.document, "node_choices": self.node,
                "distribution": self.distribution}

    def wire(self, lab: gr.State, run_inputs: dict) -> None:
        self.node.input(self.on_node, [lab, self.node], self.distribution, api_visibility="private")
        self.trace_btn.click(self.on_download_trace, lab, self.trace_btn, api_name="download_trace")
        self.svg_btn.click(self.on_download_svg, lab, self.svg_btn, api_name="download_svg")
        self.share_btn.click(self.on_share, None, self.share_link, inputs_kwargs=run_inputs, api_name="share_link")

    # ---- events -----------------------------------------------------------------------------------------
    @visitor_handler(_unchanged, session=Lab)
    def on_node(self, request: gr.Request, lab, node_id):
        return distribution(lab.on_screen(), node_id)

    @visitor_handler(_refused_download, session=Lab)
    def on_download_trace(self, request: gr.Request, lab) -> str:
        return trim_downloads(request, lab.export_trace(str(download_folder(request))), self.policy)

    @visitor_handler(_refused_download, session=Lab)
    def on_download_svg(self, request: gr.Request, lab) -> str:
        screen = lab.on_screen()
        record = screen.record
        if record is None:
            raise SpecvizError("No step to export yet: Step, Run or load a trace first.")
        path = write_tree_svg(record, download_folder(request) / f"specviz-tree-step{record.step}.svg",
                              token_text=screen.token_text)
        return trim_downloads(request, path, self.policy)

    @visitor_handler(_refused_text)
    def on_share(self, request: gr.Request, max_new_tokens, **settings) -> str:
        """A link to the page with these settings (the same named parameters as /step)."""
        wanted = VisitorRequest.from_inputs(settings, max_new_tokens, self.policy)
        query, names_example = link_for(wanted, self.context.examples)
        note = "" if names_example else " (the prompt is not an example, so the link leaves it out)"
        return f"Link to these settings: [{query}]({query}){note}"
