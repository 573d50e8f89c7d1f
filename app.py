"""specviz: the Gradio app. A thin layer: every action calls specviz.ui.lab.Lab, which holds the logic."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # the app works offline; it phones nobody

import gradio as gr  # noqa: E402

from specviz.errors import SpecvizError  # noqa: E402
from specviz.index import datastore
from specviz.ui.lab import Lab, shared_model
from specviz.tools.suite import example_prompts
from specviz.methods import BUDGET_MAX, METHODS
from specviz.core.models import DEFAULT_MODEL
from specviz.ui.viz import TOKEN_CSS, distribution_figure, prediction_figure, tree_figure

ASSETS = Path(__file__).parent / "assets"
EXAMPLES = example_prompts(ASSETS / "suite.jsonl")
# every method parameter once (methods share names such as tau); each method reads only its own
PARAMS = list({p.name: p for m in METHODS.values() for p in m.params}.values())


MESSAGE_AT = 8   # index of the message among the outputs (see build_app)

RUN_MODES = [("device default (CPU: fp32, exact)", ""),
             ("bf16: faster on big trees, not bitwise exact (differences classified)", "bf16"),
             ("fp32 + torch.compile (slower on this CPU; compiles on first use)", "compile"),
             ("bf16 + torch.compile", "bf16+compile")]


def _settings(lab: Lab | None, model, draft_model, mode, prompt, method, auto_budget, budget, temperature, top_p,
              seed, *param_values) -> Lab:
    lab = lab or Lab()
    lab.apply(model, prompt, method, "auto" if auto_budget else budget,
              {p.name: v for p, v in zip(PARAMS, param_values)}, draft_model, mode, temperature, top_p, seed)
    return lab


def _shown(lab: Lab):
    """lab.view() as the page's outputs: the node list becomes the dropdown's choices."""
    *head, choices, chart = lab.view()
    return (lab, *head, gr.update(choices=choices, value=choices[0][1] if choices else None), chart)


def eta_state(temperature):
    """eta means nothing at temperature 0 (greedy verification): the slider is off there, and says why."""
    if float(temperature or 0) > 0:
        return gr.update(interactive=True, info="")
    return gr.update(value=0.0, interactive=False,
                     info="off at temperature 0: verification is greedy there and p_hat needs a temperature")


def on_node(lab, node_id):
    return (lab or Lab()).distribution(node_id)


def param_visibility(method: str):
    """Show the chosen method's parameters only."""
    own = {p.name for p in METHODS[method].params} if method in METHODS else set()
    return [gr.update(visible=p.name in own) for p in PARAMS]


def param_input(p):
    label = f"{p.name}: {p.help}"
    visible = p in METHODS["racer"].params
    if p.choices:
        return gr.Dropdown(list(p.choices), value=p.default, label=label, visible=visible, elem_id=f"param-{p.name}")
    return gr.Slider(p.low, p.high, value=p.default, step=1 if p.kind is int else 0.01, label=label, visible=visible,
                     elem_id=f"param-{p.name}")


def _failed(lab: Lab | None, error: Exception):
    """Bad input: show the message, keep the session (and what it generated) as it was."""
    lab = lab or Lab()
    shown = list(_shown(lab))
    shown[MESSAGE_AT] = f"⚠️ {error}"
    return tuple(shown)


def on_step(lab, max_new_tokens, *settings):
    try:
        lab = _settings(lab, *settings)
        lab.step(int(max_new_tokens))
    except SpecvizError as error:
        return _failed(lab, error)
    return _shown(lab)


def on_run(lab, max_new_tokens, *settings):
    try:
        lab = _settings(lab, *settings)
        for _ in lab.run(int(max_new_tokens)):
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


def on_load_model(name, mode=""):
    try:
        lm = shared_model(name, mode)
    except SpecvizError as error:
        return f"⚠️ {error}"
    from specviz.core.modes import parse_mode

    notes = "".join(f" ⚠️ {note}" for note in [*parse_mode(mode).notes, *lm.notes])
    return (f"Loaded **{lm.name}** on {lm.device}, mode **{lm.mode}** (linear kernel {lm.linear}, "
            f"{'lean' if lm.lean else 'stock'} forward), context {lm.max_context}.{notes}")


def build_app() -> gr.Blocks:
    with gr.Blocks(title="specviz: speculative decoding with draft trees") as demo:
        lab = gr.State(None)
        gr.Markdown("# specviz\nEach step drafts a tree of candidate tokens, verifies it in **one forward pass** "
                    "with tree attention, and keeps the longest path the target model agrees with, plus one token "
                    "of its own (the bonus). Colour = where a node came from; marker = what the target did with it.")
        with gr.Row():
            with gr.Column(scale=2):
                example = gr.Dropdown(list(EXAMPLES), label="Example prompts (from assets/suite.jsonl)", value=None)
                prompt = gr.Textbox(label="Prompt (text, or {\"messages\": [...]} JSON for a chat)", lines=7,
                                    elem_id="prompt")
            with gr.Column(scale=1):
                method = gr.Dropdown(list(METHODS), value="racer", label="Method")
                auto_budget = gr.Checkbox(value=True, label="Budget: auto (from the measured verify cost)",
                                          elem_id="auto-budget")
                budget = gr.Slider(1, BUDGET_MAX, value=16, step=1, label="Tree budget (draft nodes per step)")
                max_new_tokens = gr.Slider(1, 1024, value=128, step=1, label="Max new tokens")
                with gr.Accordion("Sampling", open=False):
                    temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, elem_id="temperature",
                                            label="Temperature (0 = greedy; > 0 samples, verified by lossless "
                                                  "speculative sampling)")
                    top_p = gr.Slider(0.01, 1.0, value=1.0, step=0.01, label="Top-p (nucleus mass)", elem_id="top-p")
                    seed = gr.Number(value=0, label="Seed (whole number; the same seed repeats a sampled run)",
                                     elem_id="seed")
                with gr.Accordion("Method parameters", open=False):
                    param_inputs = [param_input(p) for p in PARAMS]
                with gr.Accordion("Model", open=False):
                    model = gr.Textbox(value=os.environ.get("SPECVIZ_MODEL", DEFAULT_MODEL),
                                       label="Hub id or local folder (default: packaged SmolLM2-135M-Instruct)")
                    draft_model = gr.Textbox(value=os.environ.get("SPECVIZ_DRAFT_MODEL", ""), label="Draft model of the model source (respec, reader, rapid, "
                                             "unified): blank = the target's own weights (self-speculation); "
                                             "self-skip:K = only its first K layers (cheap); or a hub id / local "
                                             "folder with the target's vocabulary", elem_id="draft-model")
                    mode = gr.Dropdown(RUN_MODES, value=os.environ.get("SPECVIZ_MODE", ""), label="Run mode "
                                       "(precision and compile; a mode this machine cannot run falls back to "
                                       "fp32 eager and says so)", elem_id="run-mode")
                    load = gr.Button("Load model")
                    model_status = gr.Markdown()
        with gr.Row():
            step_btn = gr.Button("Step", variant="primary", elem_id="step-btn")
            run_btn = gr.Button("Run", variant="primary", elem_id="run-btn")
            stop_btn = gr.Button("Stop", elem_id="stop-btn")
            reset_btn = gr.Button("Reset", elem_id="reset-btn")
        message = gr.Markdown(elem_id="message")
        counters = gr.Markdown(elem_id="counters")
        with gr.Row():
            with gr.Column(scale=5):
                tree = gr.Plot(value=tree_figure(None), label="Draft tree of the last step", elem_id="tree-plot")
            with gr.Column(scale=3, min_width=360):
                split = gr.Markdown(elem_id="budget-split")
                method_step = gr.Markdown(elem_id="method-step")
        text = gr.HTML(label="Generated text", elem_id="generated")
        prediction = gr.Plot(value=prediction_figure([]), label="Predicted vs measured accepted drafts",
                             elem_id="prediction-plot")
        diff = gr.HTML(label="Difference from the lossless output", elem_id="token-diff")
        with gr.Row():
            with gr.Column(scale=3):
                document = gr.HTML(label="Document (rapid: the chunks the RAG drafter reads are highlighted)",
                                   elem_id="document")
            with gr.Column(scale=2):
                node = gr.Dropdown([], label="Node of the last step (sampling): p, q and p_hat at its position",
                                   elem_id="node-pick")
                distribution = gr.Plot(value=distribution_figure(None, None, str), elem_id="distribution-plot",
                                       label="p (target), q (draft), p_hat (eta) and what was emitted")

        settings = [model, draft_model, mode, prompt, method, auto_budget, budget, temperature, top_p, seed,
                    *param_inputs]
        outputs = [lab, tree, text, counters, split, method_step, diff, prediction, message, document, node,
                   distribution]
        method.change(param_visibility, method, param_inputs)
        eta = next(widget for p, widget in zip(PARAMS, param_inputs) if p.name == "eta")
        temperature.change(eta_state, temperature, eta)
        demo.load(eta_state, temperature, eta)
        node.input(on_node, [lab, node], distribution)
        example.change(lambda label: EXAMPLES.get(label, ""), example, prompt, api_name="example")
        step_btn.click(on_step, [lab, max_new_tokens, *settings], outputs, api_name="step")
        run_event = run_btn.click(on_run, [lab, max_new_tokens, *settings], outputs, api_name="run")
        stop_btn.click(on_stop, lab, outputs, cancels=[run_event], api_name="stop")
        reset_btn.click(on_reset, lab, outputs, api_name="reset")
        load.click(on_load_model, [model, mode], model_status, api_name="load_model")
    return demo


def main() -> None:
    parser = argparse.ArgumentParser(description="specviz app")
    # a Hugging Face Space (SPACE_ID set) routes traffic to 0.0.0.0; everywhere else stay on loopback
    default_host = "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"
    parser.add_argument("--host", default=os.environ.get("SPECVIZ_HOST", default_host))
    parser.add_argument("--port", type=int, default=int(os.environ.get("SPECVIZ_PORT", "7860")))
    args = parser.parse_args()
    lm = shared_model(None)  # load the chosen (SPECVIZ_MODEL) or default model; on first use dequantise
    datastore.ensure(lm)     # READER's datastore from the shipped corpus, built once per tokenizer
    build_app().queue(default_concurrency_limit=4).launch(server_name=args.host, server_port=args.port,
                                                          css=TOKEN_CSS)


if __name__ == "__main__":
    main()
