"""The planner's acceptance record (engine.planner.AcceptanceModel), carried from one session to the next of the same
setting in this process.

A session that starts from a fair coin per kind of node mispredicts its first steps and keeps or cuts their trees on
that guess: over the suite, a node that retrieval and search agreed on is accepted about four times in five, a lone
search guess one time in twenty. Starting from the process's latest record of the setting, each key still follows
the session's own text within a few observations (its moving average). Measured in `bench`, before and after, in
docs/benchmarks.md (issue 70, "the planner's record carried").

Kept per setting (the models, the method and its parameters, the budget and the sampling: anything that changes what
a kind of node is worth), as the measured drafter speeds are (drafters.stage_gain), for at most MAX_SETTINGS settings,
the latest used kept. Only the tree the planner verifies changes: the tokens are the target's whatever it verifies."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from specviz.engine.planner import AcceptanceModel

MAX_SETTINGS = 16  # a public page's visitors can make any number of settings: the record of each is ~100 kB

_latest: "OrderedDict[str, tuple]" = OrderedDict()  # setting -> the latest session's AcceptanceModel.checkpoint()
_lock = threading.Lock()


def _fresh_lock_in_a_fork() -> None:  # runtime.shared_resources says why
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_a_fork)


def starting_model(setting: str) -> AcceptanceModel:
    """A record for a new session of this setting: the latest session's, or a fresh one."""
    model = AcceptanceModel()
    with _lock:
        saved = _latest.get(setting)
    if saved is not None:
        model.rollback(saved)  # copies the dicts
    return model


def publish(setting: str, model: AcceptanceModel) -> None:
    """After a step: the record a later session of this setting starts from (a copy, so the session goes on
    changing its own)."""
    saved = model.checkpoint()
    with _lock:
        _latest[setting] = saved
        _latest.move_to_end(setting)
        while len(_latest) > MAX_SETTINGS:
            _latest.popitem(last=False)


def forget() -> None:
    """Every setting's record dropped: the next session of each starts from the prior."""
    with _lock:
        _latest.clear()


def snapshot() -> "OrderedDict[str, tuple]":
    """Every setting's latest record, to restore later (bench: each repeat of a prompt starts from what the earlier
    prompts taught, never from an earlier repeat of the same text)."""
    with _lock:
        return OrderedDict(_latest)  # the records are copies nobody changes: publish and starting_model copy


def restore(saved: "OrderedDict[str, tuple]") -> None:
    with _lock:
        _latest.clear()
        _latest.update(saved)
