"""The app trains the draft head in the background when its target has none: `python -m specviz train-head`
in a child process at a lower priority (the app's visitors keep the machine first), its log beside the
head's file, at most one per target across the app's processes (a lock file holds the child's pid).

SPECVIZ_HEAD_TRAINING=off (the tests set it; the default on a Space, which ships its heads) starts nothing; the
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

from specviz.runtime.draft_head import TRAIN_HINT, head_path
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.shared_resources import loaded_model

ROOT = Path(__file__).resolve().parents[2]
NICENESS = 10
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
    """SPECVIZ_HEAD_TRAINING: on by default, off on a Hugging Face Space (SPACE_ID set), whose bundle ships its heads
    (runtime.shipped) and whose visitors would wait behind 13 minutes of both vCPUs."""
    default = "off" if os.environ.get("SPACE_ID") else "on"
    return os.environ.get("SPECVIZ_HEAD_TRAINING", default).strip().lower() not in ("off", "0", "no", "false")


def start_if_missing(lm: LoadedModel) -> HeadTraining:
    """Start training the head for lm in the background when it has none and none is being trained."""
    if head_path(lm).is_file():
        return status(lm)
    if not enabled():
        return status(lm)
    if _running_pid(lm) is None:
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
                            f"⏳ A draft head for {lm.name} is being trained in the background{since} (about 15 "
                            "minutes on 2 cores); until it is ready the model source drafts with the target's own "
                            "weights.")
    if not enabled():
        return HeadTraining(HeadState.OFF, f"No draft head for {lm.name} yet ({TRAIN_HINT}); the model source "
                                           "drafts with the target's own weights.")
    child = _children.get(lm.name)
    if child is not None and child.poll() not in (None, 0):
        return HeadTraining(HeadState.FAILED, f"⚠️ Training the draft head for {lm.name} failed (see {_log(lm)}); "
                                              "the model source drafts with the target's own weights.")
    return HeadTraining(HeadState.OFF, f"No draft head for {lm.name} yet ({TRAIN_HINT}).")


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
