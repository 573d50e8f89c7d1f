"""Shared read-only resources (models, the draft models runtime.draft_model_spec names, and the indexes that register
here), loaded once per process and shared by every browser session, benchmark and test.

Each resource has its own lock: a session that asks for a model being loaded waits for that load, and
nobody else does (a 20 s model load never blocks sessions that use another model or the datastore).

Every resource has a key that names it in any process of this installation: ("model", name, mode), ("datastore",
path), ... A kind registers how to load a key of its kind (`register_loader`: models here, draft models in
runtime.draft_model_spec, the indexes in their own modules), so that `resolve(key)` finds or loads it anywhere;
runtime.state_pickle writes a session's state with its resources as these keys, and a fresh process (a ZeroGPU worker)
resolves them again. A resource may name read-only parts of itself that sessions hold directly (`shared_parts()`: a
model's module and tokenizer), which travel by key too.

Models have slots: `set_model_slots(n)` keeps at most n models loaded, releasing the least recently used one when
another is loaded; `on_model_released` tells the app, which releases the sessions that held it (lab/live_sessions.py).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Callable

from specviz.runtime.gc_pauses import freeze_long_lived

_values: dict[tuple, object] = {}
_locks: dict[tuple, threading.Lock] = {}
_registry_lock = threading.Lock()   # held only to find or make a resource's own lock


def _fresh_locks_in_a_fork() -> None:
    """A forked child (ZeroGPU's worker) gets these locks as they were: one another thread held at the fork stays
    held for good there. The child starts with free ones (a load the parent had under way, it does itself)."""
    global _registry_lock
    _registry_lock = threading.Lock()
    _locks.clear()


os.register_at_fork(after_in_child=_fresh_locks_in_a_fork)
_loaders: dict[str, Callable[..., object]] = {}   # kind -> load(*key[1:])
_model_use: OrderedDict[tuple, None] = OrderedDict()   # model keys, least recently used first
_model_slots: list[int | None] = [None]   # at most this many models loaded (None: no limit)
MODEL_KINDS = ("model",)
_release_listeners: list[Callable[[tuple], None]] = []   # told the key of every model released for room


def shared(key: tuple, load: Callable[[], object] | None = None):
    """The resource under key, loaded by load() the first time (a failed load is tried again later); load None:
    the loader registered for the key's kind."""
    value = _values.get(key)
    if value is not None:
        _touch(key)
        return value
    if load is None:
        if key[0] not in _loaders:
            raise KeyError(f"no loader registered for shared resources of kind {key[0]!r}")
        load = lambda: _loaders[key[0]](*key[1:])  # noqa: E731
    with _registry_lock:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _values:
            if key[0] in MODEL_KINDS:
                _make_room_for(key)
            _values[key] = load()
            freeze_long_lived()
        _touch(key)
        return _values[key]


def register_loader(kind: str, load: Callable[..., object]) -> None:
    """How to load a resource of this kind from the rest of its key (so that any process can resolve one)."""
    _loaders[kind] = load


def resolve(key: tuple):
    """The resource under key, loaded by its kind's loader where this process does not hold it yet."""
    return shared(key)


def keys_by_id() -> dict[int, tuple]:
    """id -> key of every loaded resource and of each of its parts ((*key, '.part') for a part), for a writer
    that meets many objects (runtime.state_pickle); valid while those objects are alive."""
    keys = {}
    for key, value in list(_values.items()):
        parts = getattr(value, "shared_parts", None)
        for name, part in (parts() if parts is not None else {}).items():
            if part is not None:
                keys.setdefault(id(part), (*key, f".{name}"))
        keys[id(value)] = key
    return keys


def resolve_key(key: tuple):
    """keys_by_id's inverse: a resource, or a part of one."""
    if key and isinstance(key[-1], str) and key[-1].startswith("."):
        return resolve(key[:-1]).shared_parts()[key[-1][1:]]
    return resolve(key)


def loaded(kind: str) -> list[tuple]:
    """Keys of the resources of one kind loaded so far."""
    return [key for key in list(_values) if key[0] == kind]


def loaded_model(name: str | None):
    """The model `name` names (model_key's reading: blank is the default) where a copy of it is loaded, in any run
    mode (the most recently used copy first), else None. Loads nothing and leaves the slots' order as it is."""
    wanted = model_key(name)
    with _registry_lock:
        used = list(reversed(_model_use))
    keys = [key for key in used if key[0] == "model" and key[1] == wanted]
    keys += [key for key in loaded("model") if key[1] == wanted and key not in keys]
    return next((value for key in keys if (value := _values.get(key)) is not None), None)


def set_model_slots(slots: int | None) -> None:
    """Keep at most `slots` models loaded (None: no limit); the least recently used go first."""
    _model_slots[0] = slots


def _touch(key: tuple) -> None:
    if key[0] in MODEL_KINDS:
        with _registry_lock:
            _model_use[key] = None
            _model_use.move_to_end(key)


def _make_room_for(key: tuple) -> None:
    """Release least recently used models until one more fits in the slots (and what was built on them)."""
    slots = _model_slots[0]
    if slots is None:
        return
    while True:
        with _registry_lock:
            held = [k for k in _model_use if k in _values and k != key]
            if len(held) < slots:
                return
            oldest = held[0]
            _model_use.pop(oldest, None)
        release(oldest)
        for listener in list(_release_listeners):
            listener(oldest)


def on_model_released(listener: Callable[[tuple], None]) -> None:
    """listener(key) after a model is released to make room, so that whoever holds sessions on it lets them go
    (a session that kept a released model would pin a copy that the slots no longer count)."""
    if listener not in _release_listeners:
        _release_listeners.append(listener)


def release(key: tuple) -> None:
    """Drop one resource and everything whose key was built on it (a model's self-skip drafter, its warm table)."""
    for other in list(_values):
        if other == key or key in other[1:]:
            _values.pop(other, None)
    from specviz.runtime.memory_release import give_back_freed_memory

    give_back_freed_memory()


# ---- the project's resources ------------------------------------------------------------------------
def model_key(name: str | None) -> str:
    from specviz.runtime.loading import DEFAULT_MODEL

    return (name or "").strip() or os.environ.get("SPECVIZ_MODEL", "").strip() or DEFAULT_MODEL


def mode_key(mode: str | None) -> str:
    """The mode as typed (blank: SPECVIZ_MODE); runtime.modes.canonical gives the model's key."""
    return (mode or "").strip().lower() or os.environ.get("SPECVIZ_MODE", "").strip().lower()


def _load_model(name: str, run_mode: str):
    from specviz.runtime.loading import load_model
    from specviz.runtime.placement import placed_on_cpu

    # on a ZeroGPU Space a model placed on its CPUs loads there, the others on cuda (runtime.placement)
    lm = load_model(name, device="cpu" if placed_on_cpu(name) else None, mode=run_mode)
    lm.shared_key = ("model", name, run_mode)
    return lm


def shared_model(name: str | None, mode: str | None = None):
    """A target (or draft) model by hub id, folder or the default's name, in a run mode (runtime.modes;
    blank: SPECVIZ_MODE or the device default); read-only weights, one copy per (model, mode this machine runs):
    a mode that falls back here shares the copy of the mode it falls back to."""
    from specviz.runtime.modes import settled_here

    return shared(("model", model_key(name), settled_here(mode_key(mode))[0]))


def forget(kind: str) -> None:
    """Drop the loaded resources of one kind (a rebuilt datastore is read again on next use)."""
    for key in loaded(kind):
        _values.pop(key, None)


register_loader("model", _load_model)
