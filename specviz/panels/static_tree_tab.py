"""The Static tree tab: the static draft tree the visitor's prompts justify for a drafter (studies.static_study),
drawn depth by depth, N on a slider, the expected-speedup curve with its best N marked; an engine picker with each
serving engine's knobs for the drafter under its own drafting rule, their predicted accepted length and speedup here,
and the config to copy (engine_configs); the tree as JSON and as a GraphML file (networkx)."""

from __future__ import annotations

import gradio as gr

from specviz.studies.static_study import StaticTreeStudy
from specviz.studies.suite import SuiteItem
from specviz.lab.model_calls import call_tokens
from specviz.lab.public_policy import Policy
from specviz.lab.static_tree import MAX_DEPTH, MAX_SHOWN_N, SCOPES, TEXT_FORMATS, StaticTreeStudies
from specviz.lab.visitor_request import VisitorRequest
from specviz.panels.page_context import MODEL_QUEUE
from specviz.panels.visitor_handler import download_folder, model_call, trim_downloads, visitor_handler
from specviz.render.static_tree_figures import (engine_advice_markdown, level_table_markdown, speedup_figure,
                                                static_tree_figure)
from specviz.engine_configs.advice import EngineAdvice
from specviz.tree.static_tree_export import ENGINE_FORMATS


FORMAT_LABELS = {**ENGINE_FORMATS, "json": "JSON (the tree)"}
CODE_LANGUAGES = {"sglang": "shell", "trtllm": "yaml", "llamacpp": "shell"}  # the others are JSON


def _refused(tab: "StaticTreeTab", _, error) -> dict:
    return {tab.message: tab.policy.shown(f"⚠️ {error}")}


class StaticTreeTab:
    """Built inside build_app's Tabs; `settings_inputs` are the page's settings widgets by name (as the sweep
    takes them), whose model, run mode, draft model and prompt the study uses."""

    def __init__(self, policy: Policy, suites: dict[str, list[SuiteItem]], settings_inputs: dict, max_new_tokens):
        self.policy, self.studies = policy, StaticTreeStudies(policy, suites)
        with gr.Tab("Static tree", id="tab-static-tree"):
            gr.Markdown("How often the target followed each **rank path** of a drafter on these prompts: the best "
                        "static tree of N drafts, priced on this machine's cost curve, and what each serving engine "
                        "should be told for this drafter: vLLM's chain length, SGLang's and TensorRT-LLM's dynamic "
                        "EAGLE tree (chosen by their own rule), Medusa's choices. The drafter is the page's draft "
                        "model unless you name one (head, self, self-skip:K, eagle:PATH). CLI: "
                        "`python -m specviz static-tree`.")
            with gr.Row():
                self.drafter = gr.Textbox(label="Drafter (blank: the page's draft model)", value="",
                                          elem_id="static-drafter")
                self.scope = gr.Radio(list(SCOPES), value=SCOPES[0], label="Measured on", elem_id="static-scope")
            with gr.Row():
                self.tokens = gr.Slider(8, self.studies.max_tokens, value=32, step=1,
                                        label="New tokens per prompt (ar's continuation, followed by the drafter)",
                                        elem_id="static-tokens")
                self.depth = gr.Slider(1, MAX_DEPTH, value=4, step=1, label="Deepest level measured",
                                       elem_id="static-depth")
            go = gr.Button("Measure", variant="primary", elem_id="static-measure")
            self.message = gr.Markdown(elem_id="static-message")
            self.study = gr.State(None)
            with gr.Row():
                self.size = gr.Slider(1, 64, value=4, step=1, label="Draft tokens N", elem_id="static-n")
                self.format = gr.Radio([(FORMAT_LABELS.get(f, f), f) for f in TEXT_FORMATS], value="vllm",
                                       label="Engine", elem_id="static-format")
                deployments = StaticTreeStudies.deployments()
                self.cost = gr.Dropdown(deployments, value=deployments[0], elem_id="static-cost",
                                        label="Cost of the deployment (whose verify cost prices the trees and knobs)")
            with gr.Row():
                self.tree_plot = gr.Plot(label="The best tree of N draft tokens", elem_id="static-tree-plot")
                self.curve_plot = gr.Plot(label="Expected speedup by N", elem_id="static-curve-plot")
            self.engine_note = gr.Markdown(elem_id="static-engine")
            self.export_text = gr.Code(label="For the engine (copy)", language="json", elem_id="static-export")
            self.graphml = gr.File(label="GraphML (Gephi, networkx)", elem_id="static-graphml")
            self.table = gr.Markdown(elem_id="static-table")
        shown = [self.tree_plot, self.curve_plot, self.engine_note, self.export_text, self.graphml]
        go.click(self.on_measure, [self.drafter, self.scope, self.tokens, self.depth, self.format, self.cost,
                                   max_new_tokens],
                 inputs_kwargs=settings_inputs,
                 outputs=[self.study, self.size, *shown, self.table, self.message], api_name="static_tree",
                 concurrency_id=MODEL_QUEUE)
        for control in (self.size, self.format, self.cost):
            control.change(self.on_show, [self.study, self.size, self.format, self.cost], [*shown, self.table,
                                                                                         self.message],
                           api_visibility="private")

    # ---- events -----------------------------------------------------------------------------------------
    @visitor_handler(_refused)
    def on_measure(self, visit: gr.Request, drafter, scope, tokens, depth, fmt, cost, max_new_tokens,
                   progress=gr.Progress(), **settings):
        planned = self.studies.plan(VisitorRequest.from_inputs(settings, max_new_tokens, self.policy), drafter,
                                    settings.get("draft_model", ""), scope, tokens, depth)
        StaticTreeStudies.deployment_named(cost)  # a name that is none of the curves is refused before measuring
        with model_call(visit, call_tokens(StaticTreeStudies.call_of(planned))) as budget:
            study = self.studies.measure(planned, lambda event: progress((event.done, event.total), desc=event.label),
                                         budget)
        shown = StaticTreeStudies.priced(study, cost)
        n = min(shown.best_tokens, MAX_SHOWN_N)
        return {self.study: study, self.size: gr.update(maximum=min(study.supported, MAX_SHOWN_N), value=n),
                **self._shown(visit, shown, n, fmt), self.table: level_table_markdown(shown),
                self.message: f"Measured {study.acceptance.positions} positions on {len(planned.prompts)} prompt(s): "
                              f"the best N on the cost curve of {shown.deployment.label()} is {shown.best_tokens}; "
                              "move N to see other trees, or pick another deployment's cost."}

    @visitor_handler(_refused)
    def on_show(self, visit: gr.Request, study, n, fmt, cost):
        if not isinstance(study, StaticTreeStudy):
            return {self.message: "Measure first: the tree comes from a study."}
        shown = StaticTreeStudies.priced(study, cost)
        n = StaticTreeStudies.shown_size(shown, n)
        return {**self._shown(visit, shown, n, fmt), self.table: level_table_markdown(shown)}  # the message stays

    def _shown(self, visit, study: StaticTreeStudy, n: int, fmt) -> dict:
        tree = study.tree(n)
        exported = StaticTreeStudies.exported(study, tree, fmt)
        if isinstance(exported, EngineAdvice):
            note, text = engine_advice_markdown(exported), exported.config_text
        else:
            note, text = f"The best tree of {n} draft tokens with its measured chances.", exported
        path = StaticTreeStudies.write_graphml(tree, download_folder(visit))
        return {self.tree_plot: static_tree_figure(tree, study.acceptance.counts),
                self.curve_plot: speedup_figure(study, n), self.engine_note: note,
                self.export_text: gr.update(value=text, language=CODE_LANGUAGES.get(fmt, "json")),
                self.graphml: trim_downloads(visit, path, self.policy)}
