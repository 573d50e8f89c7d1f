"""The door in front of every route of Gradio's server (an ASGI middleware), for what no event handler can see. In
public mode every request passes it, whatever its route (lab.route_rules says what each route may be sent):

- The body is bounded before it is read: by its declared length, then as it arrives, per route (an event's body is
  the longest prompt and the other inputs; an upload is one file of the policy's size in at most a few parts; a
  reset or a cancel is a few ids; a GET carries none). A route this Space does not offer is refused by name.
- A JSON body that is not what its route takes (not JSON, nested past any event's inputs, a field of the wrong type)
  is refused with one sentence and a small answer: nothing of the input is echoed. Whatever Gradio would answer
  with FastAPI's echo (422) or a failure (500) is replaced by a sentence too.
- An event's body names an event that exists and has a function on the server, sends as many inputs as the event
  takes, a number to each slider, event data that is an object, and only files uploaded here (lab.upload_ledger):
  never a path of the server or a URL. A private event (page plumbing) is not callable by name.
- A visitor (session and address, lab.fair_share) has a bounded number of events in the queue, counted from the
  moment each is let in, and a bounded number of new sessions; the queue's last places go to visitors with fewer
  events in it. One more is answered 429 with a sentence.
- An upload is bounded in files and bytes per request, in uploads at once per address and in all, and on disk per
  address and in all (lab.upload_ledger); its files go with the session that used them.
- Gradio's queue is guarded where it could stop or be taken by one visitor (panels.queue_guard), and its store of
  sessions where it would grow with every page load (panels.gradio_sessions); the page itself is drawn once per
  origin (panels.page_cache).

Design: docs/design.md, "A door on every route"."""

from __future__ import annotations

import json
import logging
import re
import uuid

import gradio as gr

from specviz.errors import as_code, quoted
from specviz.lab.fair_share import FairShare
from specviz.lab.route_rules import (
    CALL_V2, JOIN, MAX_UPLOAD_FILES, MULTIPART, NONE, RouteRule, route_rules, rule_for, shape_refusal, too_deep,
)
from specviz.lab.upload_ledger import LEDGER
from specviz.lab.visitor_address import address_of
from specviz.panels.gradio_sessions import SessionStore
from specviz.panels.page_cache import PageCache
from specviz.panels.queue_guard import QueueGuard

LOG = logging.getLogger("specviz.door")
API_PREFIX = "/gradio_api"
SESSION_HASH = re.compile(r"[A-Za-z0-9_-]{1,64}")
JSON_ESCAPED_CHAR_BYTES = 6   # the most one character of a prompt takes in a JSON body (\u001f)
EVENT_INPUTS_BYTES = 64 * 1024  # every input but the prompt, with room (an A/B side's overrides, 60 sliders)
UPLOADS_PER_ADDRESS = 2       # uploads read at once (each buffered here, at most the upload limit)
UPLOADS_AT_ONCE = 8
STREAM_READS = re.compile(r"/(?:queue/data|heartbeat/(?P<session>[^/]+)|call/[^/]+/(?P<event>[^/]+))/?")
FAILED = "This request failed on the server and the failure is logged: try again, or report it if it keeps failing."
NOT_A_PAGE_REQUEST = "This request is not one this Space's page sends: its calls are listed under 'Use via API'."
NOT_UPLOADED = "This file was never uploaded to this Space: upload it through the page (or gradio_client) first."


def door_rules(blocks, policy) -> tuple[RouteRule, ...]:
    """The routes' rules for this page under this policy (lab.route_rules): an event's body holds the longest
    prompt, every character JSON-escaped, and the other inputs; an upload holds one file of the upload limit."""
    prompt_chars = getattr(policy, "max_prompt_chars", None) or 32_000
    upload_bytes = getattr(policy, "max_upload_bytes", None) or 20 * 2**20
    return route_rules(JSON_ESCAPED_CHAR_BYTES * prompt_chars + EVENT_INPUTS_BYTES, upload_bytes,
                       streams=any(fn.connection == "stream" for fn in blocks.fns.values()))


class VisitorGate:
    def __init__(self, app, blocks, share: FairShare, policy=None):
        self.app, self.blocks, self.share = app, blocks, share
        self.max_queue = getattr(policy, "max_queue", None)
        self.rules = door_rules(blocks, policy)
        self.guard = QueueGuard(blocks, share)
        self.sessions = SessionStore(blocks)
        self.pages = PageCache()
        self._uploading: dict[str, int] = {}
        self._api_info: dict | None = None

    def public_names(self) -> set[str]:
        return {fn.api_name for fn in self.blocks.fns.values()
                if fn.fn is not None and fn.api_visibility != "private"}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.share.limits is None:
            return await self.app(scope, receive, send)
        self.guard.ensure()
        self.sessions.ensure()
        path = scope.get("path", "")
        local = path[len(API_PREFIX):] if path == API_PREFIX or path.startswith(API_PREFIX + "/") else path
        rule, found = rule_for(self.rules, scope.get("method", ""), local)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        declared = headers.get("content-length")
        if declared is not None and not declared.isdigit():
            return await _refuse(send, 400, "A request's Content-Length is a number of bytes.")
        hopeless = _far_over(declared, 0 if rule.closed or rule.body == NONE else rule.max_body)
        if rule.closed:
            return await _refuse(send, 404, rule.closed, close=hopeless)
        if rule.body == NONE:
            if (declared and int(declared) > 0) or "transfer-encoding" in headers:
                return await _refuse(send, 413, f"{rule.what.capitalize()} carries no body.", close=hopeless)
            return await self._read_only(scope, receive, send, local)
        if declared is not None and int(declared) > rule.max_body:
            return await _refuse(send, 413, _too_big(rule), close=hopeless)
        address = address_of(headers.get("x-forwarded-for"), (scope.get("client") or (None,))[0])
        if rule.body == MULTIPART:
            return await self._upload(scope, receive, send, rule, headers, address)
        body = await _read(receive, rule.max_body)
        if body is None:
            return await _refuse(send, 413, _too_big(rule))
        try:
            payload = json.loads(body or b"null")
        except (ValueError, RecursionError):
            return await _refuse(send, 400, f"The body of {rule.what} is not JSON.")
        if too_deep(payload):
            return await _refuse(send, 400, f"The body of {rule.what} nests deeper than any of this Space's "
                                            "requests.")
        refusal = shape_refusal(rule, payload)
        if refusal is not None:
            return await _refuse(send, 400, refusal)
        if rule.event is None:
            return await self._forward(scope, receive, send, body)
        return await self._event(scope, receive, send, rule, found, payload, body, address)

    # ---- events -------------------------------------------------------------------------------------------
    async def _event(self, scope, receive, send, rule: RouteRule, found: re.Match, payload: dict, body: bytes,
                     address: str):
        if rule.event == JOIN:
            fn = self.blocks.fns.get(payload["fn_index"])
            if fn is None:
                return await _refuse(send, 404, f"This page has no event {quoted(payload['fn_index'])}.")
        else:
            name = found.group("name")
            if name not in self.public_names():
                return await _refuse(send, 404, "This event is part of the page, not of the API: the API's "
                                                "endpoints are listed under 'Use via API'.")
            fn = next(f for f in self.blocks.fns.values() if f.api_name == name and f.fn is not None)
            if rule.event == CALL_V2:  # keyword arguments: Gradio's own mapping, then the door's call by name
                data = self._v2_arguments(name, payload)
                if isinstance(data, str):
                    return await _refuse(send, 400, data)
                payload = {"data": data}
                scope = {**scope, "path": f"{API_PREFIX}/call/{name}", "raw_path": f"{API_PREFIX}/call/{name}".encode()}
        if fn.fn is None:
            return await _refuse(send, 400, "This event runs in the browser only: there is nothing to call on the "
                                            "server.")
        session = payload.get("session_hash")
        if session is None and rule.event != JOIN:  # Gradio would make one up, out of the door's count
            session = payload["session_hash"] = f"api-{uuid.uuid4().hex}"
        if rule.event != JOIN:  # the body as Gradio reads it: with the session (and a call by keywords as data)
            body = json.dumps(payload).encode()
        if not isinstance(session, str) or not SESSION_HASH.fullmatch(session):
            return await _refuse(send, 400, "A session hash is 1 to 64 letters, digits, '-' or '_'.")
        inputs = self._inputs_for(fn, payload["data"], by_index=rule.event == JOIN)
        if isinstance(inputs, str):
            return await _refuse(send, 400, inputs)
        wrong = _not_a_number(inputs) or _not_a_choice(inputs)
        if wrong is not None:  # in the form of Gradio's own validators, so that its clients show the sentence
            name, sentence = wrong
            return await _answer(send, 422, {"detail": [{"__type__": "validate", "is_valid": False,
                                                         "parameter_name": name, "message": sentence}]})
        if any(not _uploaded_here(value, session) for component, value in inputs if isinstance(component, gr.File)):
            return await _refuse(send, 400, NOT_UPLOADED)
        queue = getattr(self.blocks, "_queue", None)
        admitted = self.share.admit(session, address, getattr(queue, "pending_event_ids_session", None) or {},
                                    len(queue) if queue is not None else 0, self.max_queue)
        if isinstance(admitted, str):
            return await _refuse(send, 429, admitted)
        self.guard.seen(session)
        try:
            return await self._forward(scope, receive, send, body)
        finally:
            self.share.joined(admitted)

    def _inputs_for(self, fn, data: list, by_index: bool) -> list[tuple] | str:
        """(component, value) for each of the event's inputs a body's data gives, or the sentence refusing a count
        that is not the event's: the page sends every input (a State's as null); a call by name may leave out the
        session's states, which Gradio adds back."""
        shown = [c for c in fn.inputs if not getattr(c, "skip_api", False)]
        if len(data) == len(fn.inputs):
            return list(zip(fn.inputs, data))
        if not by_index and len(data) == len(shown):
            return list(zip(shown, data))
        return f"This event takes {len(shown)} inputs; this request sends {len(data)}."

    def _v2_arguments(self, name: str, arguments: dict) -> list | str:
        from gradio_client.utils import construct_args

        if self._api_info is None:
            self._api_info = self.blocks.get_api_info()["named_endpoints"]
        parameters = self._api_info.get("/" + name, {}).get("parameters", [])
        arguments = {k: v for k, v in arguments.items() if k != "session_hash"}
        unknown = [k for k in arguments if k not in {p.get("parameter_name") for p in parameters}]
        if unknown:
            return f"This call has no parameter {quoted(unknown[0])}: its parameters are listed under 'Use via API'."
        try:
            return construct_args(parameters, (), arguments)
        except (TypeError, ValueError):
            return "This call's parameters are given by name, each once: see 'Use via API'."

    # ---- uploads --------------------------------------------------------------------------------------------
    async def _upload(self, scope, receive, send, rule: RouteRule, headers: dict, address: str):
        boundary = re.search(r"boundary=\"?([^\";]+)", headers.get("content-type", ""))
        if not headers.get("content-type", "").startswith("multipart/form-data") or boundary is None:
            return await _refuse(send, 400, "An upload is a multipart/form-data body.")
        if self._uploading.get(address, 0) >= UPLOADS_PER_ADDRESS or \
                sum(self._uploading.values()) >= UPLOADS_AT_ONCE:
            return await _refuse(send, 429, "This Space is reading as many uploads as it can right now: try again "
                                            "in a moment.")
        self._uploading[address] = self._uploading.get(address, 0) + 1
        try:
            body = await _read(receive, rule.max_body)
            if body is None:
                return await _refuse(send, 413, _too_big(rule))
            delimiter = b"--" + boundary.group(1).encode("latin-1")
            parts = body.count(b"\r\n" + delimiter) + body.startswith(delimiter) - 1  # the last one closes
            if parts > MAX_UPLOAD_FILES:
                return await _refuse(send, 413, f"An upload carries at most {MAX_UPLOAD_FILES} files.")
            answer = _Held()
            await self.app(scope, _replayed(body, receive), answer.send)
            if answer.status == 200:
                try:
                    paths = json.loads(answer.body)
                except ValueError:
                    paths = []
                if isinstance(paths, list) and not LEDGER.record([p for p in paths if isinstance(p, str)], address):
                    return await _refuse(send, 429, "This Space holds as many uploaded files as it can right now: "
                                                    "try again in a few minutes.")
            return await answer.replay(send)
        finally:
            left = self._uploading.get(address, 1) - 1
            if left > 0:
                self._uploading[address] = left
            else:
                self._uploading.pop(address, None)

    # ---- passing on ---------------------------------------------------------------------------------------
    async def _read_only(self, scope, receive, send, local: str):
        """A request without a body; a stream a session reads its answers on is noted while it is open, so that
        the queue guard knows which sessions still have a reader."""
        reading = STREAM_READS.fullmatch(local)
        session = None
        if reading is not None:
            session = reading.group("session") or _query_value(scope, "session_hash") or \
                (self.guard.session_of_event(reading.group("event")) if reading.group("event") else None)
        if session is None:
            page = PageCache.key(scope)
            if page is not None:
                return await self.pages.answer(page, scope, receive, send,
                                               lambda *asgi: self._forward(*asgi, None))
            return await self._forward(scope, receive, send, None)
        with self.guard.reading(session):
            return await self._forward(scope, receive, send, None)

    async def _forward(self, scope, receive, send, body: bytes | None):
        """The request to Gradio (its body as read here, when it was), its answer passed on, except FastAPI's
        echo of an input (422) or a failure, which become one sentence."""
        started = False
        replacing: list = []

        async def checked_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                status = message["status"]
                if status == 422 or status >= 500:
                    replacing.append(status)
                    return
                started = True
            elif replacing:
                if not message.get("more_body"):
                    status = replacing[0]
                    replacing.clear()
                    started = True
                    await _refuse(send, 400 if status == 422 else 500,
                                  NOT_A_PAGE_REQUEST if status == 422 else FAILED)
                return
            await send(message)

        try:
            return await self.app(scope, _replayed(body, receive) if body is not None else receive, checked_send)
        except Exception:  # noqa: BLE001 (a route that broke: logged, and answered with a sentence)
            LOG.exception("specviz: %s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                await _refuse(send, 500, FAILED)
            else:
                raise


class _Held:
    """A response kept back until the door has read it (an upload's list of files)."""

    def __init__(self):
        self.status, self.start, self.chunks = 0, None, []

    async def send(self, message):
        if message["type"] == "http.response.start":
            self.status, self.start = message["status"], message
        else:
            self.chunks.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.chunks)

    async def replay(self, send):
        if self.start is None or self.status == 422 or self.status >= 500:
            return await _refuse(send, 400 if self.status == 422 else 500,
                                 NOT_A_PAGE_REQUEST if self.status == 422 else FAILED)
        await send(self.start)
        for message in self.chunks:
            await send(message)


def _not_a_number(inputs: list[tuple]) -> tuple[str, str] | None:
    """The slider and the sentence refusing its value when that is not a number; None when every slider has one
    (Gradio's own check compares the value with the slider's range and breaks on a text or a list)."""
    for component, value in inputs:
        if isinstance(component, (gr.Slider, gr.Number)) and value is not None and \
                (isinstance(value, bool) or not isinstance(value, (int, float))):
            label = (component.label or "a number").replace("`", "")
            return label, f"{label} takes a number, got {quoted(value)}."
    return None


def _not_a_choice(inputs: list[tuple]) -> tuple[str, str] | None:
    """The dropdown or radio and the sentence refusing a value that is none of its choices (Gradio's own refusal
    repeats the value as it came, and the page shows it as Markdown: a link or an image); None when each is one."""
    for component, value in inputs:
        if not isinstance(component, (gr.Dropdown, gr.Radio)) or value is None or \
                getattr(component, "allow_custom_value", False):
            continue
        allowed = [choice[1] if isinstance(choice, (tuple, list)) else choice for choice in component.choices or ()]
        values = value if getattr(component, "multiselect", False) and isinstance(value, list) else [value]
        if any(isinstance(v, (list, dict)) or v not in allowed for v in values):
            label = (component.label or "a choice").replace("`", "")
            # each choice as code too: a choice's own backtick would otherwise pair with the quoted value's
            shown = ", ".join(as_code(c) if str(c) else "(blank)" for c in allowed[:10]) + \
                (", ..." if len(allowed) > 10 else "")
            return label, f"{label} takes one of {shown}; got {quoted(value)}."
    return None


def _uploaded_here(value, session: str) -> bool:
    """A file input's value: none, or a file this Space's /upload wrote (recorded by lab.upload_ledger), which
    becomes the session's; a URL only as the address of that same file."""
    if value is None:
        return True
    if not isinstance(value, dict) or not isinstance(value.get("path"), str):
        return False
    url = value.get("url")
    if url is not None and (not isinstance(url, str) or not url.endswith("/file=" + value["path"])):
        return False
    return LEDGER.claim(value["path"], session)


def _too_big(rule: RouteRule) -> str:
    size = rule.max_body
    shown = f"{size / 2**20:.0f} MB" if size >= 2**20 else f"{size / 1024:.0f} KB" if size >= 1024 else f"{size} bytes"
    return f"{rule.what.capitalize()} may carry at most {shown}."


async def _read(receive, limit: int) -> bytes | None:
    """The request's body, or None as soon as it passes limit (the rest is never read)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replayed(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def _query_value(scope, name: str) -> str | None:
    from urllib.parse import parse_qs

    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return values[0] if values else None


# a refused body declared this far over its route's limit closes its connection after the answer: uvicorn would
# otherwise go on receiving it through h11 to throw it away, in Python on the event loop (issue 73's soak: 50 MB
# bodies in a loop, about a quarter of the interpreter's time). A client that sends such a body may read a reset
# instead of the sentence; one within a few times the limit always reads the sentence.
FAR_OVER_BYTES = 2**20
FAR_OVER_FACTOR = 4


def _far_over(declared: str | None, limit: int) -> bool:
    return declared is not None and int(declared) > max(FAR_OVER_BYTES, FAR_OVER_FACTOR * limit)


async def _refuse(send, status: int, sentence: str, close: bool = False) -> None:
    await _answer(send, status, {"detail": sentence}, close)


async def _answer(send, status: int, content: dict, close: bool = False) -> None:
    body = json.dumps(content).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status,
                "headers": headers + ([(b"connection", b"close")] if close else [])})
    await send({"type": "http.response.body", "body": body})

