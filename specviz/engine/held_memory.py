"""What a session holds in this process's memory, counted by its tensors' storage (issue 73: a budget in tokens let
a long prompt's session hold twice what it was counted for): its KV cache's buffers with their spare room and the
decoder kernel's transposed keys, and what its drafters keep of it (Drafter.held_state: a head's or a draft model's
own cache, the target features a head keeps). The model's weights, shared by every session, are not counted; nor are
the retrieval drafters' Python indexes (a few MB at the longest prompt, against hundreds of MB of caches:
docs/hostile-round-three.md).

`trim` gives back, at rest, what only a running forward needs (runtime.kv.trim)."""

from __future__ import annotations

import torch

from specviz.runtime import kv


def _held(session) -> list:
    stages = getattr(getattr(session, "method", None), "stages", None) or []
    return [session.cache, *(held for drafter in stages for held in drafter.held_state())]


def session_bytes(session) -> int:
    """The bytes session's KV cache and its drafters' state take (0 before it starts)."""
    total, storages = 0, set()
    for held in _held(session):
        if isinstance(held, torch.Tensor):
            storage = held.untyped_storage()
            if storage.data_ptr() not in storages:  # a view of one already counted is not counted again
                storages.add(storage.data_ptr())
                total += storage.nbytes()
        else:
            total += kv.resident_bytes(held)
    return total


def trim(session) -> None:
    """A session at rest: its caches and its drafters' give back their spare room and transposed copies."""
    for held in _held(session):
        if not isinstance(held, torch.Tensor):
            kv.trim(held)
