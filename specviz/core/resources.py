"""Shared read-only resources (models, the datastore), loaded once per process and shared by every
browser session, benchmark and test.

Each resource has its own lock: a session that asks for a model being loaded waits for that load, and
nobody else does (a 20 s model load never blocks sessions that use another model or the datastore).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from specviz.core.gc_pauses import freeze_long_lived

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
    from specviz.core.models import DEFAULT_MODEL

    return (name or "").strip() or os.environ.get("SPECVIZ_MODEL", "").strip() or DEFAULT_MODEL


def mode_key(mode: str | None) -> str:
    """The mode as typed (blank: SPECVIZ_MODE); core.modes.canonical gives the model's key."""
    return (mode or "").strip().lower() or os.environ.get("SPECVIZ_MODE", "").strip().lower()


def shared_model(name: str | None, mode: str | None = None):
    """A target (or draft) model by hub id, folder or the default's name, in a run mode (core.modes;
    blank: SPECVIZ_MODE or the device default); read-only weights, one copy per (model, mode)."""
    from specviz.core.models import load_model

    from specviz.core.modes import canonical

    key, run_mode = model_key(name), canonical(mode_key(mode))
    return shared(("model", key, run_mode), lambda: load_model(key, mode=run_mode))


def shared_draft(lm, spec: str | None, mode: str | None = None):
    """The draft model a method's model source uses: None for the target's own weights (spec blank),
    the target's first K layers for 'self-skip:K', else another model of the same vocabulary."""
    from specviz.core.layer_skip import parse_self_skip, self_skip_model
    from specviz.core.models import check_same_vocabulary

    spec = (spec or "").strip()
    if not spec:
        return None
    layers = parse_self_skip(spec)
    if layers is not None:
        return shared(("self-skip", id(lm.model), layers), lambda: self_skip_model(lm, layers))
    draft = shared_model(spec, mode)
    if draft is not lm:
        check_same_vocabulary(lm, draft)
    return draft


def shared_datastore(lm):
    """READER's long-term datastore for the target's tokenizer (SpecvizError when missing or corrupt)."""
    from specviz.index.datastore import Datastore, datastore_path, tokenizer_name

    path = datastore_path(tokenizer_name(lm))
    return shared(("datastore", str(path)), lambda: Datastore.load(path))


def shared_copy_logit_seed(lm):
    """The model's warm copy-logit table (index.copy_logit_seed): built from the datastore corpus on
    first use and cached on disk; every session starts from a copy."""
    from specviz.index import copy_logit_seed

    return shared(("copy-logit-seed", id(lm.model)), lambda: copy_logit_seed.ensure(lm)[0])


def forget(kind: str) -> None:
    """Drop the loaded resources of one kind (a rebuilt datastore is read again on next use)."""
    for key in loaded(kind):
        _values.pop(key, None)


def shared_embedder():
    """RAPID's sentence embedder (all-MiniLM-L6-v2 from its PyPI package), loaded on first use."""
    from specviz.index.embedder import SentenceEmbedder

    return shared(("embedder",), SentenceEmbedder)
