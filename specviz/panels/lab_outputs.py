"""The widgets that show a Lab (its LabView, field by field) and the session's Lab state: every event that
changes what the stage shows answers through here, as a dict keyed by component (no positions to keep in step).

The API's outputs come in `components` order: the lab state (not sent to API callers), then LabView's fields in
their declared order, except the two that set one widget together (steps and shown_step set the timeline)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from specviz.lab.lab import Lab
from specviz.lab.public_policy import Policy
from specviz.render.session_view import drawn_view
from specviz.render.views import LabView

# LabView's fields in order, each a widget, except steps and shown_step: together they set the timeline slider
WIDGET_FIELDS = tuple("timeline" if name == "steps" else name for name in LabView.names() if name != "shown_step")
# what a streamed Run step leaves as it was (sent with the Run's last reply): the figures and panels below the
# stage. A browser on the same cores as the server redrew two plotly figures and five panels a step otherwise.
STREAMING_KEPT = ("prediction", "distribution", "node_choices", "budget_split", "method_step", "token_diff_html",
                  "document_html")


@dataclass(frozen=True)
class LabOutputs:
    lab: gr.State
    widgets: dict[str, gr.components.Component]   # WIDGET_FIELDS name -> its widget
    policy: Policy

    def __post_init__(self):
        missing = set(WIDGET_FIELDS) - set(self.widgets)
        if missing:
            raise ValueError(f"no widget for the view's fields: {sorted(missing)}")

    @property
    def components(self) -> list:
        """An event's outputs: the lab state, then each widget of WIDGET_FIELDS."""
        return [self.lab, *(self.widgets[name] for name in WIDGET_FIELDS)]

    def shown(self, lab: Lab, view: LabView | None = None, silent_keeps_message: bool = False) -> dict:
        """What the page shows of lab (the presenter's view of its snapshot, or view: one drawn of the same snapshot
        before), by component: the node list becomes the dropdown's choices, steps and shown_step the timeline
        slider (a panel with nothing to show is hidden by the page's CSS, from the tree box's flags: the API's values
        stay plain). silent_keeps_message: an empty message leaves the page's as it is (Play's tick, which has
        nothing to say: its reply may reach the page after a Pause's, sent while the tick's was on its way, and
        cleared what the Pause said; beside a busy neighbour the browser test waited 120 s for it)."""
        view = view or drawn_view(lab.on_screen(), lab.drop_undrawable_replay)
        values = {name: getattr(view, name) for name in WIDGET_FIELDS if hasattr(view, name)}
        choices = view.node_choices
        values["node_choices"] = gr.update(choices=choices, value=choices[0][1] if choices else None)
        values["timeline"] = gr.update(maximum=max(view.steps - 1, 1), value=view.shown_step or 0,
                                       interactive=view.steps > 1)
        values["message"] = gr.skip() if silent_keeps_message and not values["message"] \
            else self.policy.shown(values["message"])
        if lab.streaming:
            values.update({name: gr.skip() for name in STREAMING_KEPT})
        return {self.lab: lab, **{self.widgets[name]: value for name, value in values.items()}}

    def failed(self, lab: Lab, error: Exception) -> dict:
        """Bad input: the message shown, the session (and what it generated) kept as it was."""
        lab.fail(error)
        return self.shown(lab)
