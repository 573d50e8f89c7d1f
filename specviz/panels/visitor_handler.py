"""What every event handler of the page does for its visitor, in one place: their session object (made on a first
call and registered with their Gradio session, so that closing the tab frees it), a refusal (SpecvizError) answered
as the panel's message instead of an error, their share for a model call (one call at a time, tokens per minute,
the call's deadline: lab.fair_share), and their own folder for downloads, cut back to the policy's size."""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import gradio as gr

from specviz.errors import SpecvizError
from specviz.lab import visitors
from specviz.lab.fair_share import SHARE, visitor_of
from specviz.lab.public_policy import Policy

STEP_TOKENS = 16  # what a Step is charged: more than most steps commit, far less than a Run

# refused(panel, session object or None, error) -> the handler's answer with the error as its message
Refusal = Callable[[object, object, SpecvizError], object]


def visitor_handler(refused: Refusal, session: type | None = None,
                    made_by: Callable[[object], object] | None = None):
    """Decorate a panel's handler `fn(panel, request, [state,] *inputs, **settings)`. With `session` (Lab, Compare),
    the argument after the request is the visitor's session object: the one their Gradio session holds, else the
    one another of their events made a moment ago (visitors.session_object), else made now (made_by(panel), or
    session()) and registered with their Gradio session. A SpecvizError raised by fn answers refused(panel, state,
    error); a streaming handler yields it after the replies it had yielded. The signature stays fn's, so Gradio
    passes the same arguments."""
    def decorate(fn):
        def opened(panel, request, args):
            if session is None:
                return None, args
            state = args[0] if args else None
            if state is None:
                state, _ = visitors.session_object(getattr(request, "session_hash", None), session,
                                                   lambda: made_by(panel) if made_by else session())
            register_session(request, state)
            return state, (state, *args[1:])

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def streaming(panel, request, *args, **kwargs):
                state, args = opened(panel, request, args)
                try:
                    yield from fn(panel, request, *args, **kwargs)
                except SpecvizError as error:
                    yield refused(panel, state, error)
            return streaming

        @functools.wraps(fn)
        def answering(panel, request, *args, **kwargs):
            state, args = opened(panel, request, args)
            try:
                return fn(panel, request, *args, **kwargs)
            except SpecvizError as error:
                return refused(panel, state, error)
        return answering
    return decorate


def register_session(request: gr.Request | None, *objects):
    """Note whose Gradio session holds these objects, so that their KV caches are freed when that session
    disconnects (Gradio keeps a disconnected session's state for an hour); the first object back."""
    visitors.register(getattr(request, "session_hash", None), *objects)
    return objects[0] if objects else None


@contextmanager
def model_call(request: gr.Request | None, tokens: int, *labs):
    """The visitor's share for a call asking for up to `tokens` new tokens, yielding the call's budget; labs (the
    sessions the call steps) are marked as theirs, so that the live-session limits count them per visitor."""
    visitor = visitor_of(request)
    for lab in labs:
        lab.visitor_address = visitor.address
    with SHARE.model_call(visitor, tokens) as budget:
        yield budget


def download_folder(request: gr.Request | None) -> Path:
    """The visitor's own folder for downloads (removed when the session is released)."""
    return visitors.files_folder(getattr(request, "session_hash", None))


def trim_downloads(request: gr.Request | None, written: str | Path, policy: Policy) -> str:
    """Cut the visitor's download folder back to the policy's size (oldest files first; `written`, the newest,
    stays) and give `written`'s path for the page's file widget."""
    visitors.keep_within(download_folder(request), policy.max_session_files_bytes)
    return str(written)
