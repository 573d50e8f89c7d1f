"""Browser sessions' objects by Gradio session, so that a session that disconnects frees its KV caches at
once: Gradio keeps a disconnected session's state for an hour, and gr.State's time_to_live only covers
sessions that stay connected. Weak references: the registry never keeps anything alive."""

from __future__ import annotations

import threading
import weakref

_open: dict[str, list[weakref.ref]] = {}
_lock = threading.Lock()


def register(session_hash: str | None, *objects) -> None:
    if not session_hash:
        return
    with _lock:
        known = [r for r in _open.get(session_hash, []) if r() is not None]
        known += [weakref.ref(o) for o in objects if all(r() is not o for r in known)]
        _open[session_hash] = known


def release(session_hash: str | None) -> int:
    """Release (obj.release()) what a disconnected session held; how many objects that was."""
    with _lock:
        refs = _open.pop(session_hash or "", [])
    objects = [r() for r in refs if r() is not None]
    for obj in objects:
        obj.release()
    return len(objects)


def open_sessions() -> int:
    with _lock:
        return len(_open)
