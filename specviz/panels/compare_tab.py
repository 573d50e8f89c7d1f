"""The A/B tab: two configurations on the page's prompt, each the page's settings with the overrides the visitor
writes, stepped or run together; their trees, texts, summaries and B's difference from A."""

from __future__ import annotations

import gradio as gr

from specviz.lab import visitors
from specviz.lab.compare import Compare
from specviz.lab.visitor_request import VisitorRequest
from specviz.panels.page_context import PageContext
from specviz.panels.visitor_handler import STEP_TOKENS, model_call, visitor_handler
from specviz.render.compare_view import compare_view
from specviz.render.tree_svg import TREE_JS
from specviz.render.views import CompareView


def _refused(tab: "CompareTab", compare: Compare, error) -> dict:
    """Bad overrides or input: said; neither side changes."""
    compare.fail(error)
    return tab.shown(compare)


class CompareTab:
    def __init__(self, context: PageContext):
        self.context, self.policy = context, context.policy
        with gr.Tab("A/B compare", id="tab-ab"):
            gr.Markdown("Two configurations on the prompt above: each side is the page's settings with the "
                        "overrides you write (`method=respec tau=3`, `budget=64`, `temperature=0.8`, ...; "
                        "`draft_model=head` on one side and `draft_model=head-eagle3` on the other compare the two "
                        "heads).")
            with gr.Row():
                self.side_a = gr.Textbox(label="Side A overrides", elem_id="side-a", value="")
                self.side_b = gr.Textbox(label="Side B overrides", elem_id="side-b", value="method=pld")
            with gr.Row():
                self.step_btn = gr.Button("Step both", elem_id="ab-step", variant="primary")
                self.run_btn = gr.Button("Run both to the end", elem_id="ab-run", variant="primary")
                self.reset_btn = gr.Button("Reset both", elem_id="ab-reset")
            message = gr.Markdown(elem_id="ab-message")
            with gr.Row():
                with gr.Column():
                    summary_a = gr.Markdown(elem_id="summary-a")
                    tree_a = gr.HTML(elem_id="tree-a", label="A: tree of the last step", js_on_load=TREE_JS)
                    text_a = gr.HTML(elem_id="text-a")
                with gr.Column():
                    summary_b = gr.Markdown(elem_id="summary-b")
                    tree_b = gr.HTML(elem_id="tree-b", label="B: tree of the last step", js_on_load=TREE_JS)
                    text_b = gr.HTML(elem_id="text-b")
            diff = gr.HTML(elem_id="ab-diff")
        self.compare = gr.State(None, time_to_live=context.session_ttl_s,
                                delete_callback=lambda c: c and visitors.release_holder(c))
        # CompareView's fields, each its widget (the API answers in CompareView's order)
        self.widgets = {"tree_a": tree_a, "tree_b": tree_b, "text_a": text_a, "text_b": text_b,
                        "summary_a": summary_a, "summary_b": summary_b, "diff_html": diff, "message": message}
        self.outputs = [self.compare, *(self.widgets[name] for name in CompareView.names())]

    def wire(self, run_inputs: dict) -> None:
        sides = [self.compare, self.side_a, self.side_b]
        model_events = self.context.model_events
        self.step_btn.click(self.on_step, sides, self.outputs, inputs_kwargs=run_inputs, api_name="ab_step",
                            **model_events)
        self.run_btn.click(self.on_run, sides, self.outputs, inputs_kwargs=run_inputs, api_name="ab_run",
                           **model_events)
        self.reset_btn.click(self.on_reset, self.compare, self.outputs, api_name="ab_reset")

    def shown(self, compare: Compare) -> dict:
        view = compare_view(compare.a.session, compare.b.session, compare.message)
        values = {name: getattr(view, name) for name in CompareView.names()}
        values["message"] = self.policy.shown(values["message"])
        return {self.compare: compare, **{self.widgets[name]: value for name, value in values.items()}}

    # ---- events -----------------------------------------------------------------------------------------
    @visitor_handler(_refused, session=Compare)
    def on_step(self, request: gr.Request, compare, side_a, side_b, max_new_tokens, **settings) -> dict:
        """Both sides one step: the page's settings (named as for /step) with each side's overrides."""
        wanted = VisitorRequest.from_inputs(settings, max_new_tokens, self.policy)
        compare.choose(wanted, side_a, side_b, self.policy)
        with model_call(request, 2 * STEP_TOKENS, compare.a, compare.b) as budget:
            compare.step(wanted.max_new_tokens, budget)
        return self.shown(compare)

    @visitor_handler(_refused, session=Compare)
    def on_run(self, request: gr.Request, compare, side_a, side_b, max_new_tokens, **settings):
        """Both sides to the end, shown as they come."""
        wanted = VisitorRequest.from_inputs(settings, max_new_tokens, self.policy)
        compare.choose(wanted, side_a, side_b, self.policy)
        with model_call(request, 2 * wanted.max_new_tokens, compare.a, compare.b) as budget:
            for _ in compare.run(wanted.max_new_tokens, budget):
                yield self.shown(compare)

    @visitor_handler(_refused, session=Compare)
    def on_reset(self, request: gr.Request, compare) -> dict:
        compare.reset()
        return self.shown(compare)
