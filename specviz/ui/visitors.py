"""Browser sessions' objects by Gradio session, so that a closed tab frees its KV caches at once (Gradio
itself keeps a closed session's state for an hour; gr.State's time_to_live covers clients without a page)."""

from __future__ import annotations

import threading

_open: dict[str, list] = {}
_lock = threading.Lock()


def register(session_hash: str | None, *objects) -> None:
    if session_hash:
        with _lock:
            known = _open.setdefault(session_hash, [])
            known.extend(o for o in objects if all(o is not k for k in known))


def release(session_hash: str | None) -> int:
    """Release (obj.release()) everything a closed session held; how many objects that was."""
    with _lock:
        objects = _open.pop(session_hash or "", [])
    for obj in objects:
        obj.release()
    return len(objects)


def open_sessions() -> int:
    with _lock:
        return len(_open)
