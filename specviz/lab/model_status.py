"""The Model box's answer when a model is loaded: the model (found loaded, or loaded now) described, with what
its run mode changed on this machine. The draft head's status is lab.head_training.status_for_model."""

from __future__ import annotations

from specviz.runtime.modes import parse_mode, settled_here
from specviz.runtime.shared_resources import shared_model


def load_and_describe(name: str, mode: str) -> str:
    """Load the (checked) model in the run mode, or find it loaded: its description and the mode's notes."""
    lm = shared_model(name, mode)
    notes = [*parse_mode(mode).notes, *settled_here(mode)[1]]
    return lm.description() + "".join(f" ⚠️ {note}" for note in notes)
