"""What a new visitor sees before touching anything: the shipped recording of the default method at its
first step, its prompt shown and marked as recorded, playing by itself (no model needed). The page is built
with this view as its initial values, so a tree is on screen as soon as the page is."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from specviz.lab.lab import Lab
from specviz.render.recording import user_message
from specviz.render.session_view import AUTOPLAY_FLAG, lab_view
from specviz.render.views import LabView

FIRST_PACE_S = 2.5  # seconds per step while a first visit plays: each phase of a step, then the step held still


@dataclass(frozen=True)
class FirstView:
    view: LabView
    example: str | None      # the example prompt the recording ran on (its label), if it is one
    prompt: str              # the recording's prompt, for the prompt box: Step or Run go live on it


def open_first_visit(lab: Lab, trace: Path | None, name: str | None) -> Lab:
    """Put the recording on the lab at its first step, playing by itself (nothing when there is none)."""
    if trace is not None and lab.recording() is None:
        lab.open_recording(trace, name or trace.stem)
    return lab


def first_view(trace: Path | None, name: str | None, examples: dict[str, str]) -> FirstView:
    """The first visit's view, and the example prompt it ran on (matched by text) for the prompt box."""
    lab = open_first_visit(Lab(), trace, name)
    prompt = user_message(lab.replay.prompt_text) if lab.replay is not None else ""
    example = next((label for label, text in examples.items() if text.strip() == prompt.strip()), None)
    # the page's first paint has no autoplay flag: a touch before the session exists has nothing to stop
    # (the session's first view adds it; the tree is the same, so its animation does not start again)
    view = lab_view(lab.on_screen())
    return FirstView(replace(view, text_html=view.text_html.replace(AUTOPLAY_FLAG, "")), example,
                     examples[example] if example else prompt)
