"""The Model box of the settings panel: the target, the draft model and the run mode (free text here, the
allow-list as dropdowns in public mode), the draft head's status (with a button that trains one where it is
missing, never on a public Space) and the Load button."""

from __future__ import annotations

import os

import gradio as gr

from specviz.errors import SpecvizError
from specviz.lab import head_training, model_status
from specviz.lab.input_values import text_value
from specviz.lab.visitor_request import MAX_NAME_CHARS
from specviz.panels.page_context import PageContext
from specviz.panels.visitor_handler import visitor_handler
from specviz.runtime.loading import DEFAULT_MODEL

DRAFT_MODELS = [("default: the trained draft head when there is one, else self", ""),
                ("head: the draft head trained for the target (python -m specviz train-head)", "head"),
                ("head-eagle3: the EAGLE-3-shaped head (python -m specviz train-head --shape eagle3)", "head-eagle3"),
                ("self: the target's own weights (self-speculation)", "self"),
                ("self-skip:8: the target's first 8 layers (cheap, untrained)", "self-skip:8")]
RUN_MODES = [("device default (CPU: fp32, exact)", ""),
             ("gguf: the GGUF file's own 4- and 8-bit weights (CPU; the default model), exact within the mode",
              "gguf"),
             ("bf16: faster on big trees, not bitwise exact (differences classified)", "bf16"),
             ("fp32 + torch.compile (slower on this CPU; compiles on first use)", "compile"),
             ("bf16 + torch.compile", "bf16+compile")]
HEAD_STATUS_EVERY_S = 30  # the page asks how the background training of the head goes this often
DRAFT_LABEL = ("Draft model of the model source (respec, reader, rapid, unified): blank = the trained draft head "
               "when the target has one, else the target's own weights; self-skip:K = only its first K layers "
               "(cheap, untrained)")
MODE_LABEL = "Run mode (precision and compile; a mode this machine cannot run falls back to fp32 eager and says so)"


def _refused_training(panel: "ModelPanel", _, error):
    return panel.policy.shown(f"⚠️ {error}"), gr.Timer(active=False), gr.Button(visible=False)


def _refused_loading(panel: "ModelPanel", _, error) -> str:
    return panel.policy.shown(f"⚠️ {error}")

class ModelPanel:
    def __init__(self, context: PageContext):
        self.policy = policy = context.policy
        if policy.public:
            self.model = gr.Dropdown(list(policy.models), value=policy.default_model, elem_id="model",
                                     label="Model (this Space's list)")
            self.draft_model = gr.Dropdown(list(policy.drafts), value="", elem_id="draft-model",
                                           label=DRAFT_LABEL + "; or a model of this Space's list")
            self.mode = gr.Dropdown([(label, value) for label, value in RUN_MODES if "compile" not in value],
                                    value="", label=MODE_LABEL, elem_id="run-mode")
        else:
            self.model = gr.Textbox(value=os.environ.get("SPECVIZ_MODEL", DEFAULT_MODEL), elem_id="model",
                                    label="Hub id or local folder (default: packaged SmolLM2-135M-Instruct)")
            self.draft_model = gr.Dropdown(
                DRAFT_MODELS, value=os.environ.get("SPECVIZ_DRAFT_MODEL", ""), allow_custom_value=True,
                elem_id="draft-model", label=DRAFT_LABEL + "; eagle:PATH = a published EAGLE-1/2 or EAGLE-3 head "
                                                           "(folder or hub id); or type a hub id / local folder with the "
                                                           "target's vocabulary")
            self.mode = gr.Dropdown(RUN_MODES, value=os.environ.get("SPECVIZ_MODE", ""), label=MODE_LABEL,
                                    elem_id="run-mode")
        self.head_status = gr.Markdown(elem_id="head-status")
        self.train_head = gr.Button("Train a draft head", visible=False, size="sm", elem_id="train-head")
        self.load = gr.Button("Load model", visible=not policy.public)
        self.model_status = gr.Markdown()
        self.head_timer = gr.Timer(HEAD_STATUS_EVERY_S, active=False)
        self.model_events = context.model_events

    def wire(self, demo: gr.Blocks) -> None:
        private = dict(api_visibility="private")
        shown = [self.head_status, self.head_timer, self.train_head]
        demo.load(self.on_head_status, self.model, shown, **private)
        self.head_timer.tick(self.on_head_status, self.model, shown, **private)
        self.train_head.click(self.on_train_head, self.model, shown, **private)
        self.load.click(self.on_load_model, [self.model, self.mode], self.model_status, api_name="load_model",
                        api_visibility="private" if self.policy.public else "public", **self.model_events)

    def on_head_status(self, name):
        """Where the draft head of the page's model stands; the timer keeps asking while it trains (or while the
        model still loads)."""
        if not isinstance(name, str) and name is not None:
            return "", gr.Timer(active=False), gr.Button(visible=False)
        status = head_training.status_for_model(name)
        if status is None:
            return "", gr.Timer(active=True), gr.Button(visible=False)
        return self.shown_status(name, status)

    def shown_status(self, name, status: head_training.HeadTraining):
        offer = status.offer and not self.policy.public
        label = head_training.button_label(name) if offer else "Train a draft head"
        return (self.policy.shown(status.message), gr.Timer(active=status.training),
                gr.Button(label, visible=offer))

    @visitor_handler(_refused_training)
    def on_train_head(self, request: gr.Request, name):
        """The button: train the page's model's head in a child process (never on a public Space)."""
        if self.policy.public or (not isinstance(name, str) and name is not None):
            raise SpecvizError("This Space ships its draft heads and trains none.")
        name = self.policy.check_model(text_value("model", name, MAX_NAME_CHARS))
        return self.shown_status(name, head_training.start_for_model(name))

    @visitor_handler(_refused_loading)
    def on_load_model(self, request: gr.Request, name, mode=""):
        if self.policy.public:  # no button on a public Space; its event still has an index a client can call
            raise SpecvizError("This Space loads its models itself: pick one in the Model box and press Step.")
        name = self.policy.check_model(text_value("model", name, MAX_NAME_CHARS))
        mode = self.policy.check_mode(text_value("mode", mode, MAX_NAME_CHARS))
        return self.policy.shown(model_status.load_and_describe(name, mode))
