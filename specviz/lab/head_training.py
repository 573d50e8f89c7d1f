"""Training a draft head from the page: the Model box's button starts `python -m specviz train-head` in a child
process at a lower priority (the app's visitors keep the machine first), its log beside the head's file, at most
one per target across the app's processes (a lock file holds the child's pid). Nothing starts it by itself: the
default model's head ships in assets/trained, and another model has none until someone presses the button, which
says how long it takes here (meanwhile the model source drafts with the target's own weights).

SPECVIZ_HEAD_TRAINING=off (the tests set it; the default on a Space, which ships its heads) offers no button; the
status then says how to train by hand.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from specviz.errors import SpecvizError
from specviz.runtime.draft_head import TRAIN_HINT, head_path
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.placement import on_space
from specviz.runtime.shared_resources import loaded_model

ROOT = Path(__file__).resolve().parents[2]
NICENESS = 10
# what `train-head` costs, for the button's estimate: the target forwards about this many tokens (the text it
# writes and reads), at about this many times a 64-token forward's cost per token (generation in batches and the
# features), and the head's own training takes about this long (measured on the default model, 2 cores)
TRAINING_FORWARD_TOKENS = 300_000
FORWARD_OVERHEAD = 2.0
TRAINING_STEPS_MINUTES = 4.0
ASSUMED_GFLOPS = 100.0   # a 2-core CPU's batched forward, where no cost curve is known yet
_children: dict[str, subprocess.Popen] = {}


class HeadState(Enum):
    """Where the draft head of one target stands."""
    READY = "ready"          # its file is there: the model source drafts with it
    TRAINING = "training"    # a child process trains it
    OFF = "off"              # none, and none being trained (background training off, or not started)
    FAILED = "failed"        # the training child of this process exited with an error


@dataclass(frozen=True)
class HeadTraining:
    """Where the head of one target stands: ready, training (since when), or neither, and what to show."""
    state: HeadState
    message: str        # markdown for the page's head status
    offer: bool = False  # the page offers its button to train one here

    @property
    def training(self) -> bool:
        """Still training: the page keeps asking."""
        return self.state is HeadState.TRAINING


def _lock(lm: LoadedModel) -> Path:
    return head_path(lm).with_suffix(".training")


def _log(lm: LoadedModel) -> Path:
    return head_path(lm).with_suffix(".log")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _running_pid(lm: LoadedModel) -> int | None:
    try:
        pid = int(_lock(lm).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _alive(pid) else None


def enabled() -> bool:
    """SPECVIZ_HEAD_TRAINING: the button is offered by default, not on a Hugging Face Space (SPACE_ID set), whose
    bundle ships its heads (runtime.shipped) and whose visitors would wait behind minutes of both vCPUs."""
    default = "off" if on_space() else "on"
    return os.environ.get("SPECVIZ_HEAD_TRAINING", default).strip().lower() not in ("off", "0", "no", "false")


def estimate_minutes(lm: LoadedModel) -> float:
    """About how long `train-head` takes for lm here: its text is mostly the target's forwards, priced by this
    machine's cost curve (a forward of 64 tokens, per token), and the training of the head, about as long again
    (measured on the default model: docs/benchmarks.md, "The draft head")."""
    from specviz.engine import costmodel

    curve = costmodel.known_curve(lm)  # measures nothing: a page's status must not wait for forwards
    if curve is not None:
        per_token_ms = curve.cost_ms(64) / 64
    else:  # no curve yet: two FLOPs a weight a token at ASSUMED_GFLOPS
        per_token_ms = 2 * sum(p.numel() for p in lm.model.parameters()) / (ASSUMED_GFLOPS * 1e6)
    return TRAINING_FORWARD_TOKENS * per_token_ms * FORWARD_OVERHEAD / 60_000 + TRAINING_STEPS_MINUTES


def start(lm: LoadedModel) -> HeadTraining:
    """Start training the head for lm in the background (the Model box's button); nothing when it has one or one
    is being trained. SpecvizError where training here is off (a public Space)."""
    if head_path(lm).is_file() or _running_pid(lm) is not None:
        return status(lm)
    if not enabled():
        raise SpecvizError(f"This app does not train draft heads ({TRAIN_HINT} on your own machine).")
    path = head_path(lm)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = _log(lm).open("w")
    command = [sys.executable, "-m", "specviz", "train-head", "--model", lm.name, "--device", "cpu"]
    child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=lambda: os.nice(NICENESS))
    _lock(lm).write_text(f"{child.pid} {time.time():.0f}\n")
    _children[lm.name] = child
    return status(lm)


def status(lm: LoadedModel) -> HeadTraining:
    if head_path(lm).is_file():
        return HeadTraining(HeadState.READY, f"Draft head for {lm.name}: trained; the model source drafts with it.")
    pid = _running_pid(lm)
    if pid is not None:
        try:
            started = float(_lock(lm).read_text().split()[1])
            since = f", started {time.strftime('%H:%M', time.localtime(started))}"
        except (OSError, ValueError, IndexError):
            since = ""
        return HeadTraining(HeadState.TRAINING,
                            f"⏳ A draft head for {lm.name} is being trained in the background{since} (its log: "
                            f"{_log(lm)}); until it is ready the model source drafts with the target's own weights.")
    if not enabled():
        return HeadTraining(HeadState.OFF, f"No draft head for {lm.name} yet ({TRAIN_HINT}); the model source "
                                           "drafts with the target's own weights.")
    child = _children.get(lm.name)
    if child is not None and child.poll() not in (None, 0):
        return HeadTraining(HeadState.FAILED, f"⚠️ Training the draft head for {lm.name} failed (see {_log(lm)}); "
                                              "the model source drafts with the target's own weights.", offer=True)
    return HeadTraining(HeadState.OFF, f"No draft head for {lm.name} yet: the model source drafts with the target's "
                                       f"own weights. The button below trains one here (or run `python -m specviz "
                                       "train-head`).", offer=True)


def button_label(name: str | None) -> str:
    """The Model box's button for the page's model (loaded), with what training costs here."""
    lm = loaded_model(name)
    if lm is None:
        return "Train a draft head"
    return f"Train a draft head for {lm.name} (about {estimate_minutes(lm):.0f} minutes of both cores here)"


def start_for_model(name: str | None) -> HeadTraining:
    """The button: train a head for the page's model (loaded already: the status offered the button)."""
    lm = loaded_model(name)
    if lm is None:
        raise SpecvizError("The model is still loading: press the button again once it is loaded.")
    return start(lm)


def status_for_model(name: str | None) -> HeadTraining | None:
    """Where the draft head of the page's model stands (name as the page sends it: blank is the default model);
    None while no copy of that model is loaded (it is still loading: ask again). Loads nothing."""
    lm = loaded_model(name)
    return status(lm) if lm is not None else None


def _stop_children() -> None:
    for child in _children.values():
        if child.poll() is None:
            child.terminate()


atexit.register(_stop_children)
