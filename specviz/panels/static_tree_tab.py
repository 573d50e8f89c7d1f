"""The Static tree tab: the static draft tree the visitor's prompts justify for a drafter (engine.static_study),
drawn depth by depth, N on a slider, the expected-speedup curve with its best N marked, and the tree in each
serving engine's format to copy (tree.static_tree_export), with a GraphML file (networkx)."""

from __future__ import annotations

import gradio as gr

from specviz.engine.static_study import StaticTreeStudy
from specviz.engine.suite import SuiteItem
from specviz.errors import SpecvizError, quoted
from specviz.tree.static_tree_export import FORMATS, export
from specviz.lab import model_calls
from specviz.lab import visitors
from specviz.lab.input_values import text_value, whole_number
from specviz.lab.lab import Lab
from specviz.lab.lab_state import CallAction, ModelCall, StaticTreeRequest
from specviz.lab.public_policy import Policy
from specviz.render.static_tree_figures import level_table_markdown, speedup_figure, static_tree_figure
from specviz.lab.visitor_request import MAX_NAME_CHARS, VisitorRequest
from specviz.panels.visitor_calls import model_call

SCOPES = ("page prompt", "tuning suite", "held-out suite")
TEXT_FORMATS = tuple(f for f in FORMATS if f != "graphml")  # GraphML comes as a file
MAX_RANK = 16        # ranks tracked at each level: more than a 64-token tree uses on the default model
MAX_DEPTH = 8
MAX_TOKENS = 256     # new tokens per prompt where no public limit applies
MAX_SHOWN_N = 128    # the N slider's top (a tree of more is not drawn usefully)


class StaticTreeTab:
    """Built inside build_app's Tabs; `settings_inputs` are the page's settings widgets by name (as the sweep
    takes them), whose model, run mode, draft model and prompt the study uses."""

    def __init__(self, policy: Policy, suites: dict[str, list[SuiteItem]], settings_inputs: dict, max_new_tokens):
        self.policy, self.suites = policy, suites
        with gr.Tab("Static tree", id="tab-static-tree"):
            gr.Markdown("The **static** draft tree a serving engine takes (vLLM's `speculative_token_tree`, "
                        "TensorRT-LLM's `eagle_choices`, SGLang's three flags, Medusa's choices), chosen from how often "
                        "the target followed each rank path of the drafter on these prompts, priced on this "
                        "machine's cost curve. The drafter is the page's draft model unless you name one "
                        "(head, self, self-skip:K, eagle:PATH). CLI: `python -m specviz static-tree`.")
            with gr.Row():
                self.drafter = gr.Textbox(label="Drafter (blank: the page's draft model)", value="",
                                          elem_id="static-drafter")
                self.scope = gr.Radio(list(SCOPES), value=SCOPES[0], label="Measured on", elem_id="static-scope")
            with gr.Row():
                self.tokens = gr.Slider(8, policy.max_sweep_tokens or MAX_TOKENS, value=32, step=1,
                                        label="New tokens per prompt (ar's continuation, followed by the drafter)",
                                        elem_id="static-tokens")
                self.depth = gr.Slider(1, MAX_DEPTH, value=4, step=1, label="Deepest level measured",
                                       elem_id="static-depth")
            go = gr.Button("Measure", variant="primary", elem_id="static-measure")
            self.message = gr.Markdown(elem_id="static-message")
            self.study = gr.State(None)
            with gr.Row():
                self.size = gr.Slider(1, 64, value=4, step=1, label="Draft tokens N", elem_id="static-n")
                self.format = gr.Radio(list(TEXT_FORMATS), value="vllm", label="Format", elem_id="static-format")
            with gr.Row():
                self.tree_plot = gr.Plot(label="The best tree of N draft tokens", elem_id="static-tree-plot")
                self.curve_plot = gr.Plot(label="Expected speedup by N", elem_id="static-curve-plot")
            self.export_text = gr.Code(label="For the engine (copy)", language="json", elem_id="static-export")
            self.graphml = gr.File(label="GraphML (Gephi, networkx)", elem_id="static-graphml")
            self.table = gr.Markdown(elem_id="static-table")
        shown = [self.tree_plot, self.curve_plot, self.export_text, self.graphml]
        go.click(self.on_measure, [self.drafter, self.scope, self.tokens, self.depth, max_new_tokens],
                 inputs_kwargs=settings_inputs,
                 outputs=[self.study, self.size, *shown, self.table, self.message], api_name="static_tree",
                 concurrency_id="model")
        for control in (self.size, self.format):
            control.change(self.on_show, [self.study, self.size, self.format], [*shown, self.message],
                           api_visibility="private")

    # ---- events -----------------------------------------------------------------------------------------
    def on_measure(self, visit: gr.Request, drafter, scope, tokens, depth, max_new_tokens, progress=gr.Progress(),
                   **settings):
        try:
            chosen = VisitorRequest.from_inputs(settings, max_new_tokens, self.policy).settings
            # the drafter named here, else the page's draft model box (whatever method the page shows)
            named = text_value("drafter", drafter, MAX_NAME_CHARS).strip() or \
                text_value("draft model", settings.get("draft_model", ""), MAX_NAME_CHARS).strip()
            spec = self.policy.check_draft(named)
            tokens = whole_number("new tokens per prompt", tokens, 1, self.policy.max_sweep_tokens or MAX_TOKENS)
            depth = whole_number("deepest level", depth, 1, MAX_DEPTH)
            prompts = self._prompts(scope, chosen.prompt)
            request = StaticTreeRequest(model=chosen.model, mode=chosen.mode, drafter=spec, prompts=tuple(prompts),
                                        depth=depth, max_rank=MAX_RANK, max_new_tokens=tokens,
                                        max_prompt_tokens=chosen.max_prompt_tokens)
            call = ModelCall(CallAction.STATIC_TREE, (), static_tree=request)
            with model_call(visit, model_calls.call_tokens(call)) as budget:
                study = model_calls.studied(call, lambda event: progress((event.done, event.total), desc=event.label),
                                            budget)
        except SpecvizError as error:
            return {self.message: self.policy.shown(f"⚠️ {error}")}
        n = min(study.best_tokens, MAX_SHOWN_N)
        return {self.study: study, self.size: gr.update(maximum=min(study.supported, MAX_SHOWN_N), value=n),
                **self._shown(visit, study, n, "vllm"), self.table: level_table_markdown(study),
                self.message: f"Measured {study.acceptance.positions} positions on {len(prompts)} prompt(s): the "
                              f"best N here is {study.best_tokens}; move N to see other trees."}

    def on_show(self, visit: gr.Request, study, n, fmt):
        if not isinstance(study, StaticTreeStudy):
            return {self.message: "Measure first: the tree comes from a study."}
        try:
            n = whole_number("N", n, 1, min(study.supported, MAX_SHOWN_N))
            if fmt not in TEXT_FORMATS:
                raise SpecvizError(f"format must be one of {', '.join(TEXT_FORMATS)}, got {quoted(fmt)}.")
        except SpecvizError as error:
            return {self.message: f"⚠️ {error}"}
        return self._shown(visit, study, n, fmt)  # the study's message stays

    # ---- helpers ----------------------------------------------------------------------------------------
    def _prompts(self, scope, page_prompt: str) -> list[SuiteItem]:
        if scope == "page prompt":
            return [SuiteItem.of(Lab.checked_prompt(page_prompt), id="page prompt")]
        suite = self.suites.get(scope) if isinstance(scope, str) else None
        if suite is None:
            raise SpecvizError(f"Measure on one of: {', '.join(SCOPES)}; got {quoted(scope)}.")
        limit = self.policy.max_sweep_runs
        if limit is not None and len(suite) > limit:
            raise SpecvizError(f"This Space measures on at most {limit} prompts; {scope} has {len(suite)}.")
        # the study's token count rules: an item's own limit gives way
        return [item.without_limit() for item in suite]

    def _shown(self, visit, study: StaticTreeStudy, n: int, fmt: str) -> dict:
        tree = study.tree(n)
        folder = visitors.files_folder(getattr(visit, "session_hash", None))
        path = folder / f"specviz-static-tree-{n}.graphml"
        path.write_text(export(tree, "graphml"))
        visitors.keep_within(folder, self.policy.max_session_files_bytes)
        extra = {"drafter": study.drafter, "positions": study.acceptance.positions,
                 "expected_speedup": round(study.expected_speedup[n - 1], 3), "best_tokens_here": study.best_tokens}
        return {self.tree_plot: static_tree_figure(tree, study.acceptance.counts),
                self.curve_plot: speedup_figure(study, n),
                self.export_text: export(tree, fmt, study.engine_method, extra), self.graphml: str(path)}
