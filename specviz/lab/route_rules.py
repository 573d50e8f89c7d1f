"""What each of the server's routes may be sent in public mode, as data the door (panels.visitor_gate) reads before
it reads a body: the methods, the largest body the route needs, the body's kind and the fields of a JSON body. A
route this Space does not offer (Gradio's streaming inputs, component functions, login, screen recording, vibe
editing, run history, profiling, monitoring, reload notices) is refused by a sentence of its own; any other POST
is refused too. Design:
docs/design.md, "A door on every route"."""

from __future__ import annotations

import re
from dataclasses import dataclass

NONE, JSON, MULTIPART = "none", "json", "multipart"
JOIN, CALL, CALL_V2 = "join", "call", "call_v2"  # event bodies, by how they name the event
SMALL_BODY = 1024               # /reset, /cancel: an event id and a session hash
UPLOAD_OVERHEAD = 64 * 1024     # a multipart body's part headers and boundaries around the files
MAX_UPLOAD_FILES = 4            # files in one /upload (the page sends one trace at a time)
MAX_JSON_DEPTH = 32             # no event's inputs nest deeper (a trace travels as a file, not in a body)
MAX_JSON_KEYS = 16              # keys of an event's body (Gradio's clients send at most nine)


@dataclass(frozen=True)
class Field:
    """One key of a JSON body: the types its value may have (None allowed where optional and nullable)."""
    name: str
    kinds: tuple[type, ...]
    required: bool = True


@dataclass(frozen=True)
class RouteRule:
    what: str                   # the route as a refusal names it
    path: re.Pattern            # on the path without Gradio's /gradio_api prefix
    methods: frozenset[str]
    max_body: int = 0
    body: str = NONE
    fields: tuple[Field, ...] = ()
    event: str | None = None    # JOIN, CALL, CALL_V2: the body runs one of the page's events
    closed: str | None = None   # the sentence refusing a route this Space does not offer
    max_keys: int | None = MAX_JSON_KEYS  # a JSON object's keys (None: a call by keywords names each input)

    def matches(self, method: str, path: str) -> re.Match | None:
        return self.path.fullmatch(path) if method in self.methods else None


POST = frozenset({"POST"})
ANY_READ = frozenset({"GET", "HEAD", "OPTIONS"})
NOT_OFFERED = "This Space does not offer {what}."


def _closed(what: str, pattern: str, methods: frozenset[str] = POST) -> RouteRule:
    return RouteRule(what, re.compile(pattern), methods, closed=NOT_OFFERED.format(what=what))


def route_rules(event_body_bytes: int, upload_bytes: int, streams: bool = False) -> tuple[RouteRule, ...]:
    """The rules, first match wins. event_body_bytes: the largest event body (the longest prompt, JSON-escaped,
    and the other inputs); upload_bytes: the largest file a visitor may upload; streams: whether an event of the
    page streams its inputs (none does). Gradio's direct calls (/run/NAME, /api/NAME), which skip the queue and so
    every share, are closed: off a Space Gradio would answer them."""
    event_fields = (Field("data", (list,)), Field("session_hash", (str, type(None)), False),
                    Field("event_data", (dict, type(None)), False), Field("trigger_id", (int, type(None)), False),
                    Field("event_id", (str, type(None)), False), Field("oauth_token", (str, type(None)), False),
                    Field("simple_format", (bool,), False), Field("batched", (bool, type(None)), False))
    join_fields = (Field("fn_index", (int,)), *event_fields)
    rules = [
        RouteRule("the queue's join", re.compile(r"/queue/join/?"), POST, event_body_bytes, JSON,
                  join_fields, event=JOIN),
        RouteRule("a call by name", re.compile(r"/call/v2/(?P<name>[^/]+)/?"), POST, event_body_bytes, JSON,
                  event=CALL_V2, max_keys=None),
        RouteRule("a call by name", re.compile(r"/call/(?P<name>[^/]+)/?"), POST, event_body_bytes, JSON,
                  (Field("data", (list,)), Field("session_hash", (str, type(None)), False)), event=CALL),
        RouteRule("an upload", re.compile(r"/upload/?"), POST, upload_bytes + UPLOAD_OVERHEAD, MULTIPART),
        RouteRule("a reset", re.compile(r"/reset/?"), POST, SMALL_BODY, JSON, (Field("event_id", (str,)),)),
        RouteRule("a cancel", re.compile(r"/cancel/?"), POST, SMALL_BODY, JSON,
                  (Field("session_hash", (str,)), Field("fn_index", (int,)), Field("event_id", (str,)))),
    ]
    rules.append(RouteRule("a direct call", re.compile(r"/(?:run|api)/[^/]+/?"), POST,
                           closed="This Space runs events through its queue: call POST /gradio_api/call/NAME with "
                                  "{\"data\": [...]}, then read GET /gradio_api/call/NAME/EVENT_ID."))
    if not streams:
        rules.append(_closed("streamed inputs", r"/stream/.+"))
    rules += [
        _closed("component functions", r"/component_server/?"),
        _closed("logging in", r"/login/?"),
        _closed("logging in", r"/logout/?", ANY_READ),
        _closed("screen recordings", r"/process_recording/?"),
        _closed("vibe editing", r"/(?:vibe-edit|undo-vibe-edit|vibe-code|vibe-starter-queries)/?",
                POST | ANY_READ),
        _closed("a run history", r"/(?:run-history/.*|runs/?)", POST | ANY_READ),
        _closed("profiling", r"/profiling/.*", POST | ANY_READ),
        _closed("monitoring", r"/monitoring(?:/.*)?", POST | ANY_READ),
        _closed("the MCP server", r"/mcp(?:/.*)?", POST | ANY_READ),
        # a reload watcher: one connection polls 20 times a second for as long as it stays open
        _closed("reload notices", r"/dev/reload/?", POST | ANY_READ),
        # a deep copy of a session's whole configuration written to disk, per GET (the page offers no deep links)
        _closed("deep links", r"/deep_link/?", POST | ANY_READ),
        RouteRule("a page request", re.compile(r".*"), ANY_READ),  # no body: Gradio's GET routes read none
        _closed("this request", r".*", frozenset({"POST", "PUT", "PATCH", "DELETE"})),
    ]
    return tuple(rules)


def rule_for(rules: tuple[RouteRule, ...], method: str, path: str) -> tuple[RouteRule, re.Match] | None:
    for rule in rules:
        found = rule.matches(method, path)
        if found is not None:
            return rule, found
    return None


def shape_refusal(rule: RouteRule, payload) -> str | None:
    """The sentence refusing a JSON body that is not what the route takes, or None."""
    if not isinstance(payload, dict):
        return f"The body of {rule.what} is a JSON object."
    if rule.max_keys is not None and len(payload) > rule.max_keys:
        return f"The body of {rule.what} has at most {rule.max_keys} keys."
    for spec in rule.fields:
        if spec.name not in payload:
            if spec.required:
                return f"The body of {rule.what} needs '{spec.name}'."
            continue
        value = payload[spec.name]
        if isinstance(value, bool) and bool not in spec.kinds or not isinstance(value, spec.kinds):
            kinds = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in spec.kinds)
            return f"In the body of {rule.what}, '{spec.name}' must be {kinds}."
    return None


_KIND_NAMES = {list: "a list", dict: "an object", str: "a text", int: "a whole number", bool: "true or false",
               type(None): "null"}


def too_deep(value, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests deeper than limit (iteratively: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False
