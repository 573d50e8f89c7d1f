"""Draft model specs: the one reading of the draft model a user names for a target (the app, the CLI, draft-quality,
the static-tree study), and the draft models it names as shared resources (runtime.shared_resources): the trained
draft head ("head", "head:FILE"), the EAGLE-3-shaped head trained here ("head-eagle3"), a published EAGLE head
("eagle:PATH"), the target's first K layers ("self-skip:K"), the target itself ("self" or blank), or another model.
Each kind registers its loader here, so that a state holding one travels as its key (runtime.state_pickle)."""

from __future__ import annotations

from typing import Callable

from specviz.errors import SpecvizError
from specviz.runtime.shared_resources import register_loader, resolve, shared, shared_model

SELF_DRAFT = "self"  # a draft model spec: the target's own weights (as a blank one)


def _self_skip(model: tuple, layers: int):
    from specviz.runtime.layer_skip import self_skip_model

    return self_skip_model(resolve(model), layers)


def _head(model: tuple, file: str, stamp: int):
    """The trained draft head in file for the target under key model (runtime.draft_head; stamp: the file's
    modification time when it was first read, part of the key only)."""
    from pathlib import Path

    from specviz.runtime.draft_head import load_head

    return load_head(resolve(model), Path(file))


def head_for_path(lm, path: str = ""):
    """The head of a file for lm, loaded once per process and target: a shared resource keyed by the
    target's key, the file and its modification time (a retrained head is read again), so that a session
    state holding it travels as that key (runtime.state_pickle) and another process loads the same file."""
    from pathlib import Path

    from specviz.runtime.draft_head import head_path, load_head

    file = Path(path) if path else head_path(lm)
    stamp = file.stat().st_mtime_ns if file.is_file() else 0
    if lm.shared_key is not None:
        return shared(("head", lm.shared_key, str(file), stamp))
    return shared(("head", id(lm.model), str(file), stamp), lambda: load_head(lm, file))


def head_for(lm, path: str = ""):
    """head_for_path, or a MissingHead that says why there is none (missing, corrupt, stale, foreign)."""
    from specviz.runtime.draft_head import MissingHead

    try:
        return head_for_path(lm, path)
    except SpecvizError as error:
        return MissingHead(str(error))


def _eagle(model: tuple, location: str):
    """A published EAGLE head at location (a folder or hub id) for the target under key model."""
    from specviz.runtime.eagle_head import load_eagle

    return load_eagle(resolve(model), location)


def eagle_for(lm, location: str):
    """The EAGLE head at location for lm, loaded once per process and target (a shared resource, as the trained
    head is), or a MissingHead that says why it cannot draft (missing, damaged, made for another target)."""
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.eagle_head import load_eagle

    try:
        if lm.shared_key is not None:
            return shared(("eagle", lm.shared_key, location))
        return shared(("eagle", id(lm.model), location), lambda: load_eagle(lm, location))
    except SpecvizError as error:
        return MissingHead(str(error), name=f"eagle:{location} (unavailable)")


def _trained_eagle3(model: tuple, folder: str, stamp: int):
    """The EAGLE-3-shaped head trained here, in folder, for the target under key model (stamp: as _head's)."""
    from pathlib import Path

    return _trained_eagle3_loaded(resolve(model), Path(folder))


def trained_eagle3_for(lm):
    """The EAGLE-3-shaped head for lm (runtime.trained_eagle3: the one trained into the cache, else the shipped
    one), loaded once per process and target and keyed as the trained head is, or a MissingHead that says why it
    cannot draft."""
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC, eagle3_location

    folder = eagle3_location(lm)
    weights = folder / "model.safetensors"
    stamp = weights.stat().st_mtime_ns if weights.is_file() else 0
    try:
        if lm.shared_key is not None:
            return shared(("head-eagle3", lm.shared_key, str(folder), stamp))
        return shared(("head-eagle3", id(lm.model), str(folder), stamp),
                      lambda: _trained_eagle3_loaded(lm, folder))
    except SpecvizError as error:
        return MissingHead(str(error), name=f"{EAGLE3_SPEC} (unavailable)")


def _trained_eagle3_loaded(lm, folder):
    from specviz.runtime.eagle_head import load_eagle
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC, checked_eagle3_folder

    return load_eagle(lm, str(checked_eagle3_folder(lm, folder)), name=EAGLE3_SPEC)


def resolve_draft(lm, spec: str | None, load: Callable[[str], object]):
    """The draft model a user named for target lm: the trained draft head for 'head' or 'head:FILE'
    (runtime.draft_head: a DraftHead, or a MissingHead that says why it cannot draft), None for the target's
    own weights ('self'), the target's first K layers for 'self-skip:K' (one per process and K), a published
    EAGLE head for 'eagle:PATH' (a folder or hub id; runtime.eagle_head, or a MissingHead that says why), the
    EAGLE-3-shaped head trained here or shipped for 'head-eagle3' (runtime.trained_eagle3), else
    load(spec), refused unless it speaks the target's vocabulary. Blank: the head when this target has one
    cached, else the target's own weights. The one reading of a draft model spec (the app, the CLI,
    draft-quality)."""
    from specviz.runtime.draft_head import HEAD_SPEC, head_exists
    from specviz.runtime.eagle_files import parse_eagle_spec
    from specviz.runtime.layer_skip import parse_self_skip, self_skip_model
    from specviz.runtime.loading import check_same_vocabulary
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC

    spec = (spec or "").strip()
    if spec == HEAD_SPEC or (not spec and head_exists(lm)):
        return head_for(lm)
    if spec.startswith(f"{HEAD_SPEC}:"):  # head:FILE, a head file of one's own (another training run)
        return head_for(lm, spec[len(HEAD_SPEC) + 1:])
    if spec == EAGLE3_SPEC:
        return trained_eagle3_for(lm)
    if not spec or spec == SELF_DRAFT:
        return None
    location = parse_eagle_spec(spec)
    if location is not None:
        return eagle_for(lm, location)
    layers = parse_self_skip(spec)
    if layers is not None:
        if lm.shared_key is not None:
            return shared(("self-skip", lm.shared_key, layers))
        return shared(("self-skip", id(lm.model), layers), lambda: self_skip_model(lm, layers))
    draft = load(spec)
    if draft is not lm:
        check_same_vocabulary(lm, draft)
    return draft


def shared_draft(lm, spec: str | None, mode: str | None = None):
    """resolve_draft with another model shared as a target is (shared_model, in this run mode)."""
    return resolve_draft(lm, spec, lambda name: shared_model(name, mode))


register_loader("self-skip", _self_skip)
register_loader("head", _head)
register_loader("eagle", _eagle)
register_loader("head-eagle3", _trained_eagle3)
