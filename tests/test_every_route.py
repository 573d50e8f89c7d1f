"""Issue 73: a door on every route. The app's routes are read from its router (not a hand list) and each is sent,
with every method it takes and POST besides, an oversized body, a malformed one and a deeply nested one: each gets a
small answer (a sentence, never an echo of the input), never a failure, within a few seconds, and the process's
resident memory stays where it was. Then an event's body as an attacker writes it: an index out of range or a
text, too few inputs, a JS-only event, event data that is not an object, files never uploaded (a server path, an
internal URL), many files in one upload, the v2 call by keywords: one sentence each (no 500, no traceback, no
generic error)."""

import http.client
import json
import socket
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from app_page import launched, page_for, router_routes
from specviz.lab.public_policy import Policy, enforce
from test_app import free_port

PUBLIC = Policy.for_public()
SMALL_ANSWER = 1024
ANSWER_S = 10.0
MEMORY_GROWTH_MB = 200
GENERIC_ERROR = "has raised an exception"


@pytest.fixture(scope="module")
def door():
    """The page in public mode in this process, behind the door, its policy in force (restored afterwards). Every
    request here comes from one address (no proxy is trusted), which stands for many visitors: it may open as many
    sessions as the tests need."""
    from dataclasses import replace

    policy = replace(PUBLIC, share=replace(PUBLIC.share, new_sessions=100_000))
    enforce(policy)
    page = page_for(policy)
    port = free_port()
    launched(page, port, max_size=PUBLIC.max_queue)
    routes = router_routes(page.blocks.server_app.routes)
    config = json.loads(request(port, "GET", "/config").body)
    yield SimpleNamespace(port=port, page=page, routes=routes, config=config,
                          fns={d["id"]: d for d in config["dependencies"]})
    page.blocks.close()
    enforce(Policy.private())


def request(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None,
            timeout: float = 30) -> SimpleNamespace:
    """One request on a raw socket: the body is sent as far as the server reads it (a refused one is cut short),
    then the answer is read whole."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
        head += f"{key}: {value}\r\n"
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.encode() + b"\r\n")
        try:
            for at in range(0, len(body), 65536):
                sock.sendall(body[at:at + 65536])
        except OSError:
            pass  # refused before the body was read: the server stopped reading
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        data = answer.read()
    return SimpleNamespace(status=answer.status, body=data, seconds=time.monotonic() - started)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def assert_a_sentence(answer, what: str, marker: bytes = b"") -> None:
    assert answer.status < 500, (what, answer.status, answer.body[:300])
    assert len(answer.body) <= SMALL_ANSWER, (what, len(answer.body), answer.body[:200])
    assert not marker or marker not in answer.body, (what, "the input came back", answer.body[:200])
    assert b"Traceback" not in answer.body and GENERIC_ERROR.encode() not in answer.body, (what, answer.body)
    assert answer.seconds < ANSWER_S, (what, answer.seconds)


def test_every_route_answers_hostile_bodies_with_a_small_sentence(door):
    from specviz.panels.visitor_gate import door_rules
    from specviz.lab.route_rules import rule_for

    rules = door_rules(door.page.blocks, PUBLIC)
    assert len(door.routes) > 40  # Gradio's router: the page, the API, the queue, files, uploads, ...
    start = rss_mb()
    tried = 0
    for path, methods in door.routes:
        for method in sorted({*methods, "POST"} - {"HEAD", "OPTIONS"}):
            local = path.removeprefix("/gradio_api")
            rule, _ = rule_for(rules, method, local)
            bodies = {"oversized": b"x" * (rule.max_body + 4096), "malformed": b'{"data": [' + b"xq" * 64,
                      "deeply nested": b"[" * 100_000 + b"]" * 100_000}
            for kind, body in bodies.items():
                kind_header = "multipart/form-data; boundary=b" if rule.body == "multipart" else "application/json"
                answer = request(door.port, method, path, body, {"Content-Type": kind_header})
                assert_a_sentence(answer, f"{method} {path} ({kind})", marker=b"xqxq" if kind == "malformed"
                                  else b"[[[[" if kind == "deeply nested" else b"xxxx")
                if rule.closed or rule.body == "none":
                    assert answer.status in (404, 413), (method, path, kind, answer.status, answer.body)
                tried += 1
    assert tried > 3 * len(door.routes)
    assert rss_mb() - start < MEMORY_GROWTH_MB
    # the server is still there for an honest visitor
    counters = next(i for i, d in door.fns.items() if d.get("api_name") == "counters")
    answer = join(door, counters, [None])
    assert answer.status == 200 and b"event_id" in answer.body


def join(door, fn_index, data, session: str | None = None, event_data=None, path="/gradio_api/queue/join",
         payload: dict | None = None):
    body = payload if payload is not None else {"data": data, "fn_index": fn_index, "event_data": event_data,
                                                "trigger_id": None,
                                                "session_hash": session or f"route-{uuid.uuid4().hex[:12]}"}
    return request(door.port, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})


def completed(door, session: str, timeout: float = 120) -> dict:
    """The session's last completed message, read from its stream."""
    connection = http.client.HTTPConnection("127.0.0.1", door.port, timeout=timeout)
    try:
        connection.request("GET", f"/gradio_api/queue/data?session_hash={session}")
        last = {}
        for raw in connection.getresponse():
            line = raw.decode().strip()
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    last = message
                if message.get("msg") in ("close_stream", "unexpected_error"):
                    break
        return last
    finally:
        connection.close()


def refused(answer) -> str:
    detail = json.loads(answer.body)["detail"]
    assert isinstance(detail, str) and "\n" not in detail and len(detail) < 300, detail
    return detail


def test_an_events_body_is_checked_before_gradio_reads_it(door):
    fns = door.fns
    by_name = {d.get("api_name"): i for i, d in fns.items()}
    step = by_name["step"]
    cases = [
        ("an index out of range", join(door, 10_000, []), 404, "no event"),
        ("an index that is a text", join(door, "x", []), 400, "'fn_index' must be a whole number"),
        ("too few inputs", join(door, step, [None, 4]), 400, "takes"),
        ("a JS-only event", join(door, next(i for i, d in fns.items() if d.get("js") and not d.get("backend_fn")),
                                 []), 400, "browser only"),
        ("event data that is a number", join(door, by_name["on_token"], [None], event_data=5), 400, "an object"),
        ("event data that is a text", join(door, by_name["on_token"], [None], event_data="token"), 400, "an object"),
        ("a file never uploaded: a server path", join(door, by_name["upload_trace"], [None, {
            "path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}]), 400, "never uploaded"),
        ("a file never uploaded: an internal URL", join(door, by_name["upload_trace"], [None, {
            "path": "x.json", "url": "http://169.254.169.254/latest/", "meta": {"_type": "gradio.FileData"}}]),
         400, "never uploaded"),
        ("a direct call", request(door.port, "POST", "/gradio_api/run/step", b'{"data": []}'), 404, "through its queue"),
    ]
    for what, answer, status, words in cases:
        assert answer.status == status, (what, answer.status, answer.body)
        assert words in refused(answer), (what, answer.body)


def test_an_upload_is_bounded_in_files_and_a_file_is_named_only_once_uploaded(door):
    def upload(files: int, size: int):
        parts = b"".join(b'--b\r\nContent-Disposition: form-data; name="files"; filename="f%d.json"\r\n'
                         b"Content-Type: application/json\r\n\r\n" % n + b"{}" + bytes(size) + b"\r\n"
                         for n in range(files))
        return request(door.port, "POST", "/gradio_api/upload", parts + b"--b--\r\n",
                       {"Content-Type": "multipart/form-data; boundary=b"})

    many = upload(20, 10)
    assert many.status == 413 and "at most 4 files" in refused(many)
    big = upload(2, 3 * 2**20)  # within the file limit each, past the upload's together
    assert big.status == 413 and "at most" in refused(big)
    one = upload(1, 10)
    assert one.status == 200
    path = json.loads(one.body)[0]
    assert Path(path).is_file()
    by_name = {d.get("api_name"): i for i, d in door.fns.items()}
    answer = join(door, by_name["upload_trace"], [None, {"path": path, "meta": {"_type": "gradio.FileData"}}],
                  session="route-uploads")
    assert answer.status == 200, answer.body  # a file this Space wrote may be named, once, by a session
    assert completed(door, "route-uploads").get("success")
    from specviz.lab import visitors

    visitors.release("route-uploads")
    assert not Path(path).exists()  # and it goes with the session


def test_a_call_by_keywords_is_answered(door):
    answer = request(door.port, "POST", "/gradio_api/call/v2/counters", b"{}", {"Content-Type": "application/json"})
    assert answer.status == 200 and "event_id" in json.loads(answer.body), answer.body
    wrong = request(door.port, "POST", "/gradio_api/call/v2/step", b'{"nonsense": 1}',
                    {"Content-Type": "application/json"})
    assert wrong.status == 400 and "no parameter `'nonsense'`" in refused(wrong)


def test_every_event_outside_the_models_and_the_uploads_group_shares_one_small_group(door):
    """Public mode (panels.page.share_page_events): the churn's and the page loads' events no longer run 8 at a
    time in a group of each function's own, beside the model's calls."""
    from specviz.panels.page_context import MODEL_QUEUE, PAGE_CONCURRENCY, PAGE_QUEUE

    groups = {fn.api_name: fn.concurrency_id for fn in door.page.blocks.fns.values() if fn.fn is not None}
    assert set(groups.values()) == {MODEL_QUEUE, PAGE_QUEUE, "trace-upload"}
    assert groups["reset"] == groups["counters"] == groups["stop"] == PAGE_QUEUE and groups["step"] == MODEL_QUEUE
    assert {fn.concurrency_limit for fn in door.page.blocks.fns.values() if fn.concurrency_id == PAGE_QUEUE} == \
        {PAGE_CONCURRENCY}


def test_a_body_far_over_its_limit_is_refused_and_its_connection_closed(door):
    """50 MB declared on a route that takes none: the sentence, then the end of the connection (uvicorn would
    otherwise receive the whole body through h11 to throw it away, on the event loop); one a little over keeps it."""
    for declared, closes in ((50 * 2**20, True), (4096, False)):
        with socket.create_connection(("127.0.0.1", door.port), timeout=30) as sock:
            sock.sendall(f"GET /gradio_api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {declared}\r\n"
                         f"Content-Type: application/json\r\n\r\n".encode() + b"x" * 4096)
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            assert answer.status == 413 and "carries no body" in json.loads(answer.read())["detail"]
            assert (answer.getheader("connection") == "close") == closes
            if closes:
                assert sock.recv(1) == b""  # closed by the server, not waiting for 50 MB


def test_the_page_is_drawn_once_per_origin(door):
    """Gradio's page through the door's cache (panels.page_cache): the same page again, each origin its own root."""
    first, again = (request(door.port, "GET", "/", headers={"X-Forwarded-Host": "a.example"}) for _ in range(2))
    other = request(door.port, "GET", "/", headers={"X-Forwarded-Host": "b.example"})
    assert first.status == again.status == other.status == 200
    assert first.body == again.body and b"a.example" in first.body and b"a.example" not in other.body
    assert b"b.example" in other.body


@pytest.mark.browser
@pytest.mark.long
def test_the_page_works_through_the_door_in_a_browser(door, lm):
    """What the page itself sends passes the door: a link's settings, a Step, a Run stopped by Stop (a cancel), an
    upload (a file this Space wrote, named with its own URL); and a link's markup is shown as text. Long: a browser
    and a model's Step cost more than the default run has room for."""
    import shutil

    from playwright.sync_api import sync_playwright

    from browser_waits import WAIT_MS, wait_for_tree_after
    from test_app import CHROMIUM, launch_chromium

    if not shutil.which(CHROMIUM):
        pytest.skip("Debian chromium is not installed")
    url = f"http://127.0.0.1:{door.port}/"
    refused = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        page.on("response", lambda r: refused.append((r.status, r.url))
                if r.status >= 400 and "/gradio_api/" in r.url else None)
        page.goto(url + "?max_new_tokens=" + "%21%5Bx%5D%28https%3A%2F%2Fe.example%2Fpixel.png%29", wait_until="load")
        page.wait_for_function("(document.querySelector('#message')?.innerText || '').includes('Ignored')",
                               timeout=WAIT_MS)
        assert page.locator("#message img").count() == 0 and page.locator("#message a[href*='e.example']").count() == 0
        page.locator("#step-btn").click()
        wait_for_tree_after(page, 1, run="live", timeout=WAIT_MS)
        page.locator("#run-btn").click()
        page.wait_for_timeout(1500)
        page.locator("#stop-btn").click()
        page.wait_for_function("(document.querySelector('#message')?.innerText || '').includes('Stopped')",
                               timeout=WAIT_MS)
        page.get_by_role("tab", name="Replay").click()
        page.locator("#upload-trace input[type=file]").set_input_files(
            str(Path(__file__).parent.parent / "assets" / "traces" / "pld-code-rename.json"))
        page.wait_for_selector("#tree-box .tv[data-run^='replay:']", state="attached", timeout=WAIT_MS)
        browser.close()
    assert not refused, refused
