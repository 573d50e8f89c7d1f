"""A visitor's downloads: written in the session's own folder (lab.visitors), cut back to the policy's size."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from specviz.lab import visitors
from specviz.lab.public_policy import Policy


def download_folder(request: gr.Request | None) -> Path:
    """The visitor's own folder for downloads (removed when the session is released)."""
    return visitors.files_folder(getattr(request, "session_hash", None))


def kept(request: gr.Request | None, path: str | Path, policy: Policy) -> str:
    """path, after the visitor's folder was cut back to its size limit (oldest files first)."""
    visitors.keep_within(download_folder(request), policy.max_session_files_bytes)
    return str(path)


def session_of(request: gr.Request | None, *objects):
    """Note whose session holds these objects, so that their KV caches are freed when that session
    disconnects (Gradio keeps a disconnected session's state for an hour); the first object back."""
    visitors.register(getattr(request, "session_hash", None), *objects)
    return objects[0] if objects else None
