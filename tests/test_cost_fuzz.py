"""Issue 58: a cost fuzzer. Hypothesis draws traces and request values by size, from tiny to the limits, and
sends them through gradio_client to an app in public mode running as a server of its own (tests/public_server.py).
Each answer must come within a time bound and a size bound proportional to what was sent, the server's resident
memory must stay within its budget, and every refusal must be one sentence. The default run tries a few dozen
inputs; `--long` tries many more."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from app_page import named
from browser_waits import patient_client  # noqa: E402

LONG = os.environ.get("SPECVIZ_LONG_TESTS") == "1"  # conftest sets it for --long
EXAMPLES = 400 if LONG else 40
TRACE_EXAMPLES = 400 if LONG else 8   # per dimension (six of them)
# an answer's bounds, from what the request sent: a fixed part (the page's own markup of one step) and a part per
# byte sent. Before issue 58's fixes a 20 KB trace drew an 80 MB answer (4,000 bytes per byte sent)
ANSWER_FIXED_BYTES = 512 * 1024
ANSWER_BYTES_PER_BYTE_SENT = 16
TIME_FIXED_S = 5.0
TIME_PER_MB_SENT_S = 10.0
# the server's resident memory may grow this much over its start (no model is loaded by anything sent here), and
# one example this much over where the one before it left it: a fixed part (a step's working memory) and a part per
# byte sent (a trace's records take several times its file; issue 73 counts a visitor's share in those bytes)
MEMORY_BUDGET_BYTES = 1024 * 2**20
EXAMPLE_MEMORY_FIXED_BYTES = 96 * 2**20
EXAMPLE_MEMORY_PER_BYTE_SENT = 16
MAX_SENTENCE_CHARS = 400
MAX_UPLOAD = 4 * 2**20
GENERIC_ERROR = "has raised an exception"  # Gradio's answer where a handler or a component broke: never one of ours


@dataclass
class Server:
    url: str
    pid: int

    def resident_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


@pytest.fixture(scope="module")
def server(public_server):
    process, url = public_server
    found = Server(url, process.pid)
    found.start_bytes = found.resident_bytes()
    return found


@pytest.fixture(scope="module")
def client(server):
    """A visitor of the server, after one honest Step: a request value that happens to be valid runs a step on a
    warm model (and the memory budget counts from the model loaded)."""
    from specviz.lab.public_policy import Policy
    from test_app import settings as step_settings

    visitor = patient_client(server.url)
    warm = named(visitor.predict(**step_settings(max_new_tokens=4, model=Policy.for_public().default_model,
                                                 method="ar"), api_name="/step"))
    assert "⚠️" not in warm["message"], warm["message"]
    server.start_bytes = server.resident_bytes()
    return visitor


# ---- what is sent ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceShape:
    """A trace's sizes: what the fuzzer scales. Each field's top is past what a checked trace may hold."""
    steps: int
    nodes: int              # per step (a chain under the root)
    committed: int          # tokens a step commits
    text_chars: int         # characters of every token's text (markup: '<')
    sources: int            # sources named per node
    foreign_sources: bool   # names no drafter has, instead of 'logits' repeated
    curve_points: int       # cost_curve's length (0: none)
    curve_top: int          # the largest tree size cost_curve names
    null_timing: bool       # the middle step's draft time is null
    param_items: int        # entries of params (each a 100-character text)


def build_trace(shape: TraceShape) -> dict:
    """A trace of that shape, its tree valid: only the sizes are hostile."""
    text = "<" * shape.text_chars
    sources = [f"s{i}" for i in range(shape.sources)] if shape.foreign_sources else ["logits"] * shape.sources
    nodes = [{"id": 0, "parent": -1, "depth": 0, "token_id": 1, "text": "", "sources": [], "status": "root"}]
    nodes += [{"id": i, "parent": i - 1, "depth": i, "token_id": 7, "text": text, "sources": sources,
               "status": "unreached"} for i in range(1, shape.nodes)]
    steps = []
    for s in range(shape.steps):
        timings = {"draft": None if shape.null_timing and s == shape.steps // 2 else 1.0, "verify": 1.0,
                   "forward": 1.0, "update": 1.0, "total": 3.0}
        steps.append({"step": s, "prefix_len": 1 + s, "budget": shape.nodes, "budget_mode": "fixed",
                      "nodes": nodes, "accepted_tokens": [7] * shape.committed,
                      "accepted_origins": ["bonus"] * shape.committed, "allocation": {"logits": shape.nodes - 1},
                      "timings_ms": timings})
    curve = None
    if shape.curve_points:
        sizes = sorted({max(1, round(shape.curve_top * (i + 1) / shape.curve_points))
                        for i in range(shape.curve_points)})
        curve = {"sizes": sizes, "ms": [1.0 + i for i in range(len(sizes))]}
    return {"model": "m", "method": "pld", "params": {f"p{i}": "x" * 100 for i in range(shape.param_items)},
            "prompt_ids": [1], "format_version": 4, "token_texts": {"1": "a", "7": text}, "prompt_text": "p",
            "recorded_on": "fuzz", "cost_curve": curve, "steps": steps}


def scaled(top: int) -> st.SearchStrategy[int]:
    """1 to top, spread evenly on a log scale (most sizes are small; the limits are reached)."""
    return st.integers(0, 16).map(lambda k: max(1, round(top ** (k / 16))))


SMALL = dict(steps=3, nodes=2, committed=1, text_chars=1, sources=1, foreign_sources=False, curve_points=0,
             curve_top=1, null_timing=False, param_items=1)
# every size together, and each hole's sizes alone (the rest small): a failure of one dimension is a finding of its
# own (Hypothesis reports one failure per place it fails, so one test over every size at once names few holes)
DIMENSIONS = {
    "every size": dict(steps=scaled(64), nodes=scaled(1_200), committed=scaled(4_000), text_chars=scaled(12_000),
                       sources=scaled(50_000), foreign_sources=st.booleans(),
                       curve_points=st.integers(0, 3).map(lambda k: (0, 2, 64, 5_000)[k]),
                       curve_top=scaled(5_000_000), null_timing=st.booleans(), param_items=scaled(20_000)),
    "committed tokens and their text": dict(nodes=scaled(1_200), committed=scaled(4_000), text_chars=scaled(12_000)),
    "cost curve": dict(curve_points=st.sampled_from([2, 64]), curve_top=scaled(5_000_000)),
    "sources per node": dict(sources=scaled(50_000), foreign_sources=st.booleans()),
    "times": dict(steps=scaled(64), null_timing=st.booleans()),
    "free-form params": dict(param_items=scaled(20_000)),
}


def shapes(dimension: str) -> st.SearchStrategy[TraceShape]:
    return st.builds(TraceShape, **{**{k: st.just(v) for k, v in SMALL.items()}, **DIMENSIONS[dimension]})


def trace_bytes(data: dict) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def floor_bytes(shape: TraceShape) -> int:
    """Fewer bytes than the trace of that shape takes as JSON (each node's text and its sources' names with their
    quotes and commas, each committed token's id and comma, each param's text): a shape past the upload limit by
    this count is refused before any of ours without building it (the largest shapes would be gigabytes)."""
    source_chars = (len("s0") if shape.foreign_sources else len("logits")) + 3
    node = shape.text_chars + shape.sources * source_chars
    return shape.steps * ((shape.nodes - 1) * node + 2 * shape.committed) + 100 * shape.param_items


# ---- what comes back ------------------------------------------------------------------------------------------
@dataclass
class Answer:
    value: object
    seconds: float
    size: int


def call(client, api_name: str, *args, sent: int, **kwargs) -> Answer:
    """One request: its answer within the time bound for what was sent (a TimeoutError otherwise). Gradio's own
    refusal of a value (a slider's range) is an answer too: its sentence, which must not be the generic error."""
    from gradio_client.exceptions import AppError, ValidationError

    bound = TIME_FIXED_S + TIME_PER_MB_SENT_S * sent / 2**20
    started = time.monotonic()
    job = client.submit(*args, api_name=api_name, **kwargs)
    try:
        value = job.result(timeout=bound)
    except AppError as error:
        assert GENERIC_ERROR not in str(error), f"{api_name}: Gradio's generic error"
        value = {"refused by Gradio": str(error)}
    except ValidationError as error:  # the door's refusal of a value (panels.visitor_gate), as Gradio's clients show it
        value = {"refused by Gradio": str(error).splitlines()[-1]}
    seconds = time.monotonic() - started
    return Answer(value, seconds, len(json.dumps(value, default=str).encode()))


def message_of(answer: Answer) -> str:
    """The page's message in a Lab endpoint's answer, or Gradio's refusal as a message."""
    if isinstance(answer.value, dict):
        return "⚠️ " + answer.value["refused by Gradio"]
    return named(answer.value)["message"]


def assert_bounded(answer: Answer, sent: int, what: str) -> None:
    limit = ANSWER_FIXED_BYTES + ANSWER_BYTES_PER_BYTE_SENT * sent
    assert answer.size <= limit, f"{what}: a {answer.size:,}-byte answer to {sent:,} bytes sent (bound {limit:,})"


def assert_one_sentence(message: str, what: str, quoted: int = 0) -> None:
    """A refusal is one short sentence (or two short ones, no line breaks, no traceback); Gradio's own refusals
    quote the value they refuse whole, so they may be longer by what was sent (`quoted`)."""
    if "⚠️" not in message:
        return
    text = message.split("⚠️", 1)[1].strip()
    assert "\n" not in text and "Traceback" not in text and len(text) <= MAX_SENTENCE_CHARS + quoted, \
        (what, message[:600])


def assert_memory(server: Server, what: str, sent: int = 0) -> None:
    """The server's resident memory after an example: within the budget over its start, and within the example's
    own bound over where the example before it left it."""
    now = server.resident_bytes()
    grown = now - server.start_bytes
    assert grown <= MEMORY_BUDGET_BYTES, f"{what}: the server grew by {grown / 2**20:.0f} MB"
    before = getattr(server, "last_bytes", server.start_bytes)
    limit = EXAMPLE_MEMORY_FIXED_BYTES + EXAMPLE_MEMORY_PER_BYTE_SENT * sent
    assert now - before <= limit, \
        f"{what}: one example grew the server by {(now - before) / 2**20:.0f} MB (bound {limit / 2**20:.0f} MB)"
    server.last_bytes = max(before, now)


# ---- the fuzz tests -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dimension", list(DIMENSIONS))
@settings(max_examples=TRACE_EXAMPLES, deadline=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(draw=st.data())
def test_a_trace_costs_what_it_sends(server, client, tmp_path_factory, dimension, draw):
    from gradio_client import handle_file

    shape = draw.draw(shapes(dimension))
    if floor_bytes(shape) > MAX_UPLOAD:  # the upload limit refuses it before any of ours: nothing of ours to fuzz
        return
    client.predict(api_name="/reset")  # each example from a session with nothing shown: only its own trace counts
    data = trace_bytes(build_trace(shape))
    if len(data) > MAX_UPLOAD:  # the upload limit refuses it before any of ours: nothing of ours to fuzz
        return
    path = tmp_path_factory.mktemp("fuzz") / "trace.json"
    path.write_bytes(data)
    what = f"{shape} ({len(data):,} bytes)"
    loaded = call(client, "/upload_trace", handle_file(str(path)), sent=len(data))
    assert_bounded(loaded, len(data), what)
    assert_one_sentence(message_of(loaded), what)
    # the middle step (a step load_trace does not draw to check it), then the accounting of the shown run
    moved = call(client, "/go_to", shape.steps // 2, sent=len(data))
    assert_bounded(moved, len(data), what)
    assert_one_sentence(message_of(moved), what)
    plots = call(client, "/accounting", sent=len(data))
    assert_bounded(plots, len(data), what)
    assert_memory(server, what, len(data))


NUMBERS = st.one_of(
    st.integers(10**20, 10**40), st.integers(-10**40, -10**20),
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: x != x or abs(x) > 1e12))
VALUES = st.one_of(
    NUMBERS,
    st.sampled_from(["²", "١٢", "nan", "-inf", "1e400", "0x10", "", " ", "NaN", "∞"]),
    st.integers(4_301, 20_000).map(lambda n: "9" * n),
    st.integers(1, 16_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 16_000).map(lambda n: '{"messages": ' + "[" * n + "]" * n + "}"),
    st.lists(st.integers(), min_size=1, max_size=5),
    st.dictionaries(st.text(max_size=5), st.integers(), min_size=1, max_size=3),
    st.integers(40_000, 200_000).map(lambda n: "x" * n))
# each field with what no widget of it sends: any JSON value, numbers past every range (a text in a slider is
# refused at the door, panels.visitor_gate: Gradio's own check breaks on it)
# prompts that must be refused (a text of brackets, or a number the text box makes a text, is a prompt like any
# other: it would run)
PROMPTS = st.one_of(
    st.integers(1, 16_000).map(lambda n: '{"messages": ' + "[" * n + "]" * n + "}"),
    st.integers(32_001, 200_000).map(lambda n: "x" * n))
NOT_BLANK = VALUES.filter(lambda v: not (isinstance(v, str) and not v.strip()))  # a blank model is the default
FIELDS = {"seed": VALUES, "prompt": PROMPTS, "method": VALUES, "model": NOT_BLANK, "budget": VALUES,
          "max_new_tokens": VALUES, "temperature": VALUES, "top_p": VALUES}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), field=st.sampled_from(sorted(FIELDS)), endpoint=st.sampled_from(["/step", "/run"]))
def test_a_hostile_request_value_gets_one_sentence(server, client, data, field, endpoint):
    from specviz.lab.public_policy import Policy
    from test_app import settings as step_settings

    value = data.draw(FIELDS[field])
    request = {**step_settings(max_new_tokens=4, model=Policy.for_public().default_model, method="ar"),
               field: value}
    sent = len(json.dumps(request, default=str).encode())
    what = f"{endpoint} {field}={str(value)[:80]!r}"
    try:
        answer = call(client, endpoint, sent=sent, **request)
    except TimeoutError:
        raise AssertionError(f"{what}: no answer within the bound") from None
    # most values are refused; one that is valid after all (Arabic-Indic digits are a number) runs a step
    assert_one_sentence(message_of(answer), what, quoted=sent)
    assert_bounded(answer, sent, what)
    assert_memory(server, what, sent)
