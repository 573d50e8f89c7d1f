"""Shared read-only resources (models, and the indexes that register here), loaded once per process and shared by every
browser session, benchmark and test.

Each resource has its own lock: a session that asks for a model being loaded waits for that load, and
nobody else does (a 20 s model load never blocks sessions that use another model or the datastore).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from specviz.runtime.gc_pauses import freeze_long_lived

_values: dict[tuple, object] = {}
_locks: dict[tuple, threading.Lock] = {}
_registry_lock = threading.Lock()   # held only to find or make a resource's own lock


def shared(key: tuple, load: Callable[[], object]):
    """The resource under key, loaded by load() the first time (a failed load is tried again later)."""
    value = _values.get(key)
    if value is not None:
        return value
    with _registry_lock:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _values:
            _values[key] = load()
            freeze_long_lived()
        return _values[key]


def loaded(kind: str) -> list[tuple]:
    """Keys of the resources of one kind loaded so far."""
    return [key for key in list(_values) if key[0] == kind]


# ---- the project's resources ------------------------------------------------------------------------
def model_key(name: str | None) -> str:
    from specviz.runtime.loading import DEFAULT_MODEL

    return (name or "").strip() or os.environ.get("SPECVIZ_MODEL", "").strip() or DEFAULT_MODEL


def mode_key(mode: str | None) -> str:
    """The mode as typed (blank: SPECVIZ_MODE); runtime.modes.canonical gives the model's key."""
    return (mode or "").strip().lower() or os.environ.get("SPECVIZ_MODE", "").strip().lower()


def shared_model(name: str | None, mode: str | None = None):
    """A target (or draft) model by hub id, folder or the default's name, in a run mode (runtime.modes;
    blank: SPECVIZ_MODE or the device default); read-only weights, one copy per (model, mode)."""
    from specviz.runtime.loading import load_model

    from specviz.runtime.modes import canonical

    key, run_mode = model_key(name), canonical(mode_key(mode))
    return shared(("model", key, run_mode), lambda: load_model(key, mode=run_mode))


SELF_DRAFT = "self"  # a draft model spec: the target's own weights (as a blank one)


def resolve_draft(lm, spec: str | None, load: Callable[[str], object]):
    """The draft model a user named for target lm: the trained draft head for 'head' or 'head:FILE'
    (runtime.draft_head: a DraftHead, or a MissingHead that says why it cannot draft), None for the target's
    own weights ('self'), the target's first K layers for 'self-skip:K' (one per process and K), else
    load(spec), refused unless it speaks the target's vocabulary. Blank: the head when this target has one
    cached, else the target's own weights. The one reading of a draft model spec (the app, the CLI,
    draft-quality)."""
    from specviz.runtime.draft_head import HEAD_SPEC, head_exists, head_for
    from specviz.runtime.layer_skip import parse_self_skip, self_skip_model
    from specviz.runtime.loading import check_same_vocabulary

    spec = (spec or "").strip()
    if spec == HEAD_SPEC or (not spec and head_exists(lm)):
        return head_for(lm)
    if spec.startswith(f"{HEAD_SPEC}:"):  # head:FILE, a head file of one's own (another training run)
        return head_for(lm, spec[len(HEAD_SPEC) + 1:])
    if not spec or spec == SELF_DRAFT:
        return None
    layers = parse_self_skip(spec)
    if layers is not None:
        return shared(("self-skip", id(lm.model), layers), lambda: self_skip_model(lm, layers))
    draft = load(spec)
    if draft is not lm:
        check_same_vocabulary(lm, draft)
    return draft


def shared_draft(lm, spec: str | None, mode: str | None = None):
    """resolve_draft with another model shared as a target is (shared_model, in this run mode)."""
    return resolve_draft(lm, spec, lambda name: shared_model(name, mode))


def forget(kind: str) -> None:
    """Drop the loaded resources of one kind (a rebuilt datastore is read again on next use)."""
    for key in loaded(kind):
        _values.pop(key, None)
