"""The door in front of Gradio's routes (an ASGI middleware), for what no event handler can see:

- An event the page registers as private (api_visibility="private": page plumbing, the Play timer, the model
  loader in public mode) is not callable by name: Gradio 6 still answers /gradio_api/call/NAME for it. The page
  itself calls events by index (/gradio_api/queue/join), and each handler checks what it gets.
- A visitor (session and address, lab.fair_share) has a bounded number of events waiting or running in the queue:
  one greedy client cannot take every place of it. One more is answered 429 with a sentence.
- A request's body is bounded before Gradio reads it (the largest thing a visitor sends in a body, a prompt, is
  far smaller; files go through /upload, which Gradio bounds by max_file_size).
- A slider's value must be a number: Gradio's own check compares it with the slider's range and breaks on a text
  or a list, which the visitor reads as Gradio's generic error. Here it is one sentence (422) instead."""

from __future__ import annotations

import json
import re
import uuid

import gradio as gr

from specviz.errors import quoted
from specviz.lab.fair_share import FairShare, address_of

MAX_BODY_BYTES = 2 * 2**20
# /gradio_api/call/NAME, /gradio_api/call/v2/NAME, /gradio_api/run/NAME, /gradio_api/api/NAME (and without the prefix)
NAMED_CALL = re.compile(r"^(?:/gradio_api)?/(?:call(?:/v2)?|run|api)/([^/]+)/?$")
QUEUE_JOIN = re.compile(r"^(?:/gradio_api)?/queue/join/?$")
SESSION_HASH = re.compile(r"[A-Za-z0-9_-]{1,64}")


class VisitorGate:
    def __init__(self, app, blocks, share: FairShare):
        self.app, self.blocks, self.share = app, blocks, share

    def public_names(self) -> set[str]:
        return {fn.api_name for fn in self.blocks.fns.values()
                if fn.fn is not None and fn.api_visibility != "private"}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or self.share.limits is None:
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        named = NAMED_CALL.match(path)
        joins = QUEUE_JOIN.match(path)
        if not named and not joins:
            return await self.app(scope, receive, send)
        if named and named.group(1) not in self.public_names():
            return await _refuse(send, 404, "This event is part of the page, not of the API: the API's endpoints "
                                            "are listed under 'Use via API'.")
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > MAX_BODY_BYTES:
                return await _refuse(send, 413, f"A request may carry at most {MAX_BODY_BYTES // 2**20} MB: "
                                                "upload files through the page.")
            if not message.get("more_body"):
                break
        try:
            payload = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            return await _refuse(send, 400, "A request's body is a JSON object.")
        session = payload.get("session_hash")
        if named and session is None:  # Gradio would make one up, out of the door's count: make it here instead
            session = payload["session_hash"] = f"api-{uuid.uuid4().hex}"
            body = json.dumps(payload).encode()
        if not isinstance(session, str) or not SESSION_HASH.fullmatch(session):
            return await _refuse(send, 400, "A session hash is 1 to 64 letters, digits, '-' or '_'.")
        if joins:  # the page's and gradio_client's calls: data in the order of the event's inputs
            wrong = self._not_a_number(payload)
            if wrong is not None:  # in the form of Gradio's own validators, so that its clients show the sentence
                name, sentence = wrong
                return await _answer(send, 422, {"detail": [{"__type__": "validate", "is_valid": False,
                                                             "parameter_name": name, "message": sentence}]})
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        address = address_of(headers.get("x-forwarded-for"), (scope.get("client") or ("unknown",))[0])
        refusal = self.share.admits(session, address, self._pending())
        if refusal is not None:
            return await _refuse(send, 429, refusal)
        sent = False

        async def replayed():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replayed, send)

    def _not_a_number(self, payload: dict) -> tuple[str, str] | None:
        """The slider and the sentence refusing its value when that is not a number; None when every slider has
        one. (A /call/NAME body may leave out the session states, which Gradio adds back later: its values do not
        line up with the inputs here, and Gradio's own check answers them.)"""
        index = payload.get("fn_index")
        fn = self.blocks.fns.get(index) if isinstance(index, int) else None
        data = payload.get("data")
        if fn is None or not isinstance(data, list):
            return None
        for component, value in zip(fn.inputs, data):
            if isinstance(component, gr.Slider) and value is not None and \
                    (isinstance(value, bool) or not isinstance(value, (int, float))):
                label = component.label or "a slider"
                return label, f"{label} takes a number, got {quoted(value)}."
        return None

    def _pending(self) -> dict:
        """Gradio's events waiting or running, per session (its queue keeps this for its own bookkeeping)."""
        queue = getattr(self.blocks, "_queue", None)
        return dict(getattr(queue, "pending_event_ids_session", None) or {})


async def _refuse(send, status: int, sentence: str) -> None:
    await _answer(send, status, {"detail": sentence})


async def _answer(send, status: int, content: dict) -> None:
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
