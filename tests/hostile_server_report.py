"""Issue 73's attacks, each against `python app.py` in public mode (SPACE_ID set) in a process of its own, over raw
HTTP and with many clients at once: for each, what was sent, what came back (status and the answer's first bytes),
how long it took, the server's resident memory (start, peak, end) and, for the attacks that load the server, an
honest visitor's Step meanwhile. Not a test: it prints one line per attack (and --json FILE keeps them all).
Each group runs on a fresh server (the churn stops Gradio's queue for good on code without the guard).

Usage: .venv/bin/python tests/hostile_server_report.py [--port 7874] [--only answers,bodies,...] [--json FILE]
[--app-root DIR] (set SPECVIZ_CACHE and HF_HUB_OFFLINE=1 as for the app; --app-root attacks another checkout's
app.py, e.g. `git archive main | tar -x -C /tmp/before` for the figures before a change)."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser_waits import patient_client  # noqa: E402
sys.path.insert(0, str(ROOT))

HONEST = "192.0.2.1"  # addresses from the documentation range, sent as a Space's proxy writes them
MB = 2**20


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# ---- the server -----------------------------------------------------------------------------------------------
class App:
    """`python app.py` in public mode on port, its uploads in a folder of its own (measured on disk)."""
    def __init__(self, port: int, trust_loopback: bool = True, root: Path = ROOT):
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.temp = Path(tempfile.mkdtemp(prefix="hostile-server-"))
        env = {**os.environ, "SPACE_ID": "specviz/hostile-report", "SPECVIZ_HOST": "127.0.0.1",
               "SPECVIZ_PORT": str(port), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
               "SPECVIZ_HEAD_TRAINING": "off", "GRADIO_TEMP_DIR": str(self.temp / "gradio")}
        if trust_loopback:  # this script is the Space's proxy: its X-Forwarded-For names the visitor
            env["SPECVIZ_TRUSTED_PROXIES"] = "127.0.0.1"
        self.log = open(self.temp / "app.log", "w")
        self.process = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the app exited: {(self.temp / 'app.log').read_text()[-2000:]}")
            try:
                if request("GET", self.url + "/", timeout=5).status == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        self._read_config()
        warm = honest_step(self.url, timeout=600)  # the model loaded and warm: memory counts from here
        if warm.error:
            raise RuntimeError(f"no honest step: {warm.error}")

    @classmethod
    def attached(cls, url: str) -> "App":
        """A server someone else started (the soak's): its events, no process of ours."""
        app = cls.__new__(cls)
        app.url = url.rstrip("/")
        app._read_config()
        return app

    def _read_config(self) -> None:
        self.config = json.loads(request("GET", self.url + "/config", timeout=30).whole)
        self.components = {c["id"]: c for c in self.config["components"]}
        self.fns = {d["id"]: d for d in self.config["dependencies"]}
        self.info = json.loads(request("GET", self.url + "/gradio_api/info", timeout=30).whole)["named_endpoints"]

    @property
    def rss(self) -> float:
        return rss_mb(self.process.pid)

    def fn(self, name: str) -> int:
        return next(i for i, d in self.fns.items() if d.get("api_name") == name)

    def data_for(self, name: str, **values) -> list:
        """The event's inputs at the page's defaults (a State is null), values given by the API's parameter names."""
        fn = self.fns[self.fn(name)]
        names = iter(p["parameter_name"] for p in self.info.get("/" + name, {}).get("parameters", []))
        out = []
        for component_id in fn["inputs"]:
            component = self.components[component_id]
            if component["type"] == "state":
                out.append(None)
                continue
            value = component.get("props", {}).get("value")
            out.append(values.get(next(names, None), value))
        return out

    def uploads_on_disk(self) -> tuple[int, float]:
        files = [p for p in (self.temp / "gradio").rglob("*") if p.is_file()]
        return len(files), sum(p.stat().st_size for p in files) / MB

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, keep_log: Path | None = None) -> None:
        self.process.kill()
        self.process.wait(30)
        self.log.close()
        if keep_log is not None:
            shutil.copy(self.temp / "app.log", keep_log)
        shutil.rmtree(self.temp, ignore_errors=True)


@dataclass
class Reply:
    status: int
    head: str           # the answer's first bytes
    size: int           # bytes answered
    seconds: float
    whole: bytes = b""


def request(method: str, url: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 60,
            keep: int = 1 << 20) -> Reply:
    """One HTTP request on a connection of its own; the answer's first `keep` bytes kept, its size counted."""
    parts = urllib.parse.urlsplit(url)
    started = time.monotonic()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, path or "/", body=body, headers=headers or {})
        answer = connection.getresponse()
        kept, size = b"", 0
        while True:
            chunk = answer.read(65536)
            if not chunk:
                break
            size += len(chunk)
            if len(kept) < keep:
                kept += chunk[:keep - len(kept)]
        return Reply(answer.status, kept[:200].decode("utf-8", "replace"), size, time.monotonic() - started, kept)
    except (OSError, http.client.HTTPException) as error:
        return Reply(0, f"{type(error).__name__}: {error}"[:200], 0, time.monotonic() - started)
    finally:
        connection.close()


def post_json(url: str, path: str, payload, address: str, query: str = "", timeout: float = 60) -> Reply:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return request("POST", f"{url}{path}{query}", body, {"Content-Type": "application/json",
                                                       "X-Forwarded-For": address}, timeout)


def join(app: App, name_or_index, data: list, session: str, address: str, query: str = "", event_data=None,
         timeout: float = 60) -> Reply:
    index = name_or_index if isinstance(name_or_index, int) else app.fn(name_or_index)
    return post_json(app.url, "/gradio_api/queue/join", {"data": data, "fn_index": index, "session_hash": session,
                                                         "event_data": event_data, "trigger_id": None},
                     address, query, timeout)


def completion(app: App, session: str, timeout: float = 120) -> dict:
    """The session's stream read to its end: the last process_completed message (or what ended it)."""
    parts = urllib.parse.urlsplit(app.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    last: dict = {"msg": "no answer"}
    try:
        connection.request("GET", f"/gradio_api/queue/data?session_hash={session}")
        answer = connection.getresponse()
        if answer.status != 200:
            return {"msg": f"HTTP {answer.status}", "output": answer.read(300).decode("utf-8", "replace")}
        for raw in answer:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("msg") in ("process_completed", "unexpected_error"):
                last = message
            if message.get("msg") == "close_stream" or message.get("msg") == "unexpected_error":
                break
    except (OSError, http.client.HTTPException) as error:
        last = {"msg": f"{type(error).__name__}: {error}"}
    finally:
        connection.close()
    return last


def outcome_of(message: dict) -> str:
    """What a visitor reads of a completed event: the error's sentence, or the answer's warning, or 'answered'."""
    if message.get("msg") != "process_completed":
        return str(message.get("msg"))[:160] + " " + str(message.get("output", ""))[:160]
    output = message.get("output") or {}
    if not message.get("success"):
        return f"error: {output.get('title')!r}: {output.get('error')!r}"[:240]
    texts = [v for v in output.get("data", []) if isinstance(v, str) and "⚠️" in v]
    return texts[0][texts[0].index("⚠️"):][:200] if texts else "answered"


@dataclass
class Honest:
    seconds: float
    error: str = ""


def honest_step(url: str, address: str = HONEST, timeout: float = 300) -> Honest:
    """An honest visitor's Step (a new session each time) through gradio_client: its wait, or what went wrong."""
    from specviz.lab.public_policy import Policy
    from test_app import settings

    started = time.monotonic()
    try:
        client = patient_client(url + "/", headers={"X-Forwarded-For": address})
        out = client.submit(**settings(max_new_tokens=8, model=Policy.for_public().default_model),
                            api_name="/step").result(timeout=timeout)
        message = out[[i for i, v in enumerate(out) if isinstance(v, str) and "⚠️" in v][0]] \
            if any(isinstance(v, str) and "⚠️" in v for v in out) else ""
        return Honest(time.monotonic() - started, message[:160])
    except Exception as error:  # noqa: BLE001 (what the visitor got is the figure)
        return Honest(time.monotonic() - started, f"{type(error).__name__}: {str(error)[:160]}")


@dataclass
class Row:
    group: str
    attack: str
    sent: str
    answer: str
    seconds: float
    rss_start: float
    rss_peak: float
    rss_end: float
    honest: list = field(default_factory=list)   # (seconds, error) of honest Steps meanwhile

    def line(self) -> str:
        honest = ""
        if self.honest:
            waits = [h[0] for h in self.honest]
            errors = [h[1] for h in self.honest if h[1]]
            honest = f"; honest Steps: {len(waits)}, slowest {max(waits):.1f} s" + \
                (f", {len(errors)} not answered ({errors[0][:80]})" if errors else "")
        return (f"[{self.group}] {self.attack}: sent {self.sent}; got {self.answer}; {self.seconds:.1f} s; "
                f"RSS {self.rss_start:.0f} -> peak {self.rss_peak:.0f} -> {self.rss_end:.0f} MB{honest}")


class Measured:
    """An attack's time, the server's resident memory sampled every 0.1 s, and honest Steps run meanwhile."""
    def __init__(self, app: App, group: str, attack: str, honest: bool = False):
        self.app, self.group, self.attack, self.honest = app, group, attack, honest
        self.sent, self.answer = "", ""

    def __enter__(self):
        self.start = self.app.rss
        self.peak = self.start
        self.done = threading.Event()
        self.honest_seen: list = []
        self.started = time.monotonic()
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()
        if self.honest:
            self.visitor = threading.Thread(target=self._visit, daemon=True)
            self.visitor.start()
        return self

    def _sample(self):
        while not self.done.is_set():
            self.peak = max(self.peak, self.app.rss)
            time.sleep(0.1)

    def _visit(self):
        time.sleep(0.5)  # the attack first
        while not self.done.is_set():
            result = honest_step(self.app.url, timeout=300)
            self.honest_seen.append((round(result.seconds, 1), result.error))

    def __exit__(self, *exc):
        seconds = time.monotonic() - self.started
        self.done.set()
        if self.honest:
            self.visitor.join(330)
        self.sampler.join(5)
        time.sleep(1)
        ROWS.append(Row(self.group, self.attack, self.sent, self.answer, seconds, self.start, self.peak,
                        self.app.rss, self.honest_seen))
        print(ROWS[-1].line(), flush=True)


ROWS: list[Row] = []


def short(reply: Reply) -> str:
    return f"{reply.status} {reply.head[:140]!r} ({reply.size:,} bytes)"


# ---- the attacks ----------------------------------------------------------------------------------------------
def answers(app: App) -> None:
    """Answers that were tracebacks or generic errors, and visitor text rendered as markup."""
    step = app.data_for("step", max_new_tokens=4)
    cases = [
        ("POST /gradio_api/call/v2/counters", lambda: post_json(app.url, "/gradio_api/call/v2/counters", {},
                                                                "192.0.2.30")),
        ("fn_index out of range", lambda: join(app, 10_000, [], "fn-range", "192.0.2.31")),
        ("fn_index a text", lambda: post_json(app.url, "/gradio_api/queue/join",
                                              {"data": [], "fn_index": "x", "session_hash": "fn-text"},
                                              "192.0.2.31")),
        ("/step with too few inputs", lambda: joined(app, "step", step[:3], "few-inputs", "192.0.2.32")),
        ("the JS-only event", lambda: joined(app, next(i for i, d in app.fns.items() if d.get("js")
                                                           and not d.get("backend_fn")), [], "js-only",
                                               "192.0.2.33")),
        ("the token click with event data 5", lambda: joined(app, "on_token", [None], "token-data",
                                                             "192.0.2.34", event_data=5)),
        ("the token click with event data 'token'", lambda: joined(app, "on_token", [None], "token-text",
                                                                   "192.0.2.34", event_data="token")),
        ("/step with a list for the prompt", lambda: joined(app, "step", app.data_for("step", prompt=["x"]),
                                                            "list-prompt", "192.0.2.38")),
        ("upload_trace of /etc/passwd", lambda: joined(app, "upload_trace", [None, {
            "path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}, "orig_name": "passwd"}],
            "file-passwd", "192.0.2.35")),
        ("upload_trace of an internal URL", lambda: joined(app, "upload_trace", [None, {
            "path": "x.json", "url": "http://169.254.169.254/latest/meta-data/", "meta": {"_type": "gradio.FileData"}}],
            "file-url", "192.0.2.36")),
    ]
    for what, markup in (("an image", "![x](https://e.example/pixel.png)"),
                         ("a link", "[Log in again](https://e.example/login)"),
                         ("HTML", "<img src=x onerror=alert(1)>"), ("a JavaScript URL", "[a](javascript:alert(1))")):
        for key in ("max_new_tokens", "temperature", markup):
            query = "?" + urllib.parse.urlencode({key if key != markup else markup: markup})
            cases.append((f"share link {key if key != markup else 'key'} = {what}",
                          lambda query=query: joined(app, "url_settings", [None], f"link-{uuid.uuid4().hex[:8]}",
                                                     "192.0.2.37", query=query)))
    for what, call in cases:
        with Measured(app, "answers", what) as m:
            m.sent = what
            answer = call()
            m.answer = short(answer) if isinstance(answer, Reply) else answer


def joined(app: App, name_or_index, data, session, address, query="", event_data=None) -> str:
    """A join and, when admitted, what its stream answers."""
    reply = join(app, name_or_index, data, session, address, query, event_data)
    if reply.status != 200:
        return short(reply)
    return f"200 joined, then {outcome_of(completion(app, session))}"


def malformed(app: App) -> None:
    """A 2 MB body within the old door's limit that is not a valid request: FastAPI's 422 echoed it whole."""
    body = json.dumps({"data": "x" * (2 * MB - 200), "fn_index": 0, "session_hash": "malformed"}).encode()
    with Measured(app, "malformed", "one 2 MB non-request to /gradio_api/queue/join") as m:
        reply = post_json(app.url, "/gradio_api/queue/join", body, "192.0.2.40")
        m.sent, m.answer = f"{len(body):,} bytes", short(reply)
    stop = threading.Event()
    counts = {"sent": 0}

    def loop(n):
        while not stop.is_set():
            post_json(app.url, "/gradio_api/queue/join", body, f"192.0.2.{41 + n}", timeout=60)
            counts["sent"] += 1

    with Measured(app, "malformed", "8 connections looping it for 60 s", honest=True) as m:
        threads = [threading.Thread(target=loop, args=(n,), daemon=True) for n in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(60)
        stop.set()
        for thread in threads:
            thread.join(70)
        m.sent, m.answer = f"{counts['sent']} bodies of {len(body):,} bytes", "see the honest Steps"
    deep = b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b', "fn_index": 0, "session_hash": "deep"}'
    with Measured(app, "malformed", "a join whose data nests 100,000 deep") as m:
        m.sent, m.answer = f"{len(deep):,} bytes", short(post_json(app.url, "/gradio_api/queue/join", deep,
                                                                    "192.0.2.50"))


def bodies(app: App) -> None:
    """50 MB bodies on the routes the old door did not cover, two at once, with an honest visitor meanwhile."""
    big = b'{"x": "' + b"x" * (50 * MB) + b'"}'
    multipart = (b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.json\"\r\n"
                 b"Content-Type: application/json\r\n\r\n" + b"x" * (50 * MB) + b"\r\n--b--\r\n")
    routes = [("/gradio_api/stream/abc", big, "application/json"), ("/gradio_api/reset", big, "application/json"),
              ("/gradio_api/cancel", big, "application/json"), ("/gradio_api/component_server", big,
                                                                "application/json"),
              ("/gradio_api/upload", multipart, "multipart/form-data; boundary=b"),
              ("/gradio_api/component_server", multipart, "multipart/form-data; boundary=b")]
    for path, body, kind in routes:
        with Measured(app, "bodies", f"two 50 MB bodies at once to POST {path} ({kind.split(';')[0]})",
                      honest=True) as m:
            with ThreadPoolExecutor(2) as pool:
                replies = list(pool.map(lambda _: request("POST", app.url + path, body, {
                    "Content-Type": kind, "X-Forwarded-For": "192.0.2.60"}, timeout=120), range(2)))
            m.sent, m.answer = f"2 x {len(body) / MB:.0f} MB", short(replies[0])


def memory(app: App) -> None:
    """What visitors hold, counted in file bytes before: 4 MB traces, page loads, many files in one upload."""
    from gradio_client import handle_file

    from test_cost_fuzz import TraceShape, build_trace

    folder = app.temp / "traces"
    folder.mkdir()
    # the largest trace every check lets through, about 4 MB (a step commits at most its depth + 1 tokens)
    shape = TraceShape(steps=3_700, nodes=8, committed=2, text_chars=20, sources=1, foreign_sources=False,
                       curve_points=0, curve_top=1, null_timing=False, param_items=1)
    paths = []
    for n in range(16):  # 16 different files (Gradio stores uploads by content: the same file once)
        data = build_trace(shape)
        data["prompt_text"] = f"visitor {n}"
        path = folder / f"trace-{n}.json"
        path.write_text(json.dumps(data, separators=(",", ":")))
        paths.append(path)
    size = paths[0].stat().st_size
    with Measured(app, "memory", "16 uploads of a 4 MB trace that passes every check, from 8 addresses") as m:
        def upload(n):
            client = patient_client(app.url + "/", headers={"X-Forwarded-For": f"192.0.2.{70 + n // 2}"})
            out = client.submit(handle_file(str(paths[n])), api_name="/upload_trace").result(timeout=300)
            message = next((v for v in out if isinstance(v, str) and ("Replaying" in v or "⚠️" in v)), "")
            return message[:100], client

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(upload, range(16)))
        loaded = sum("Replaying" in r[0] for r in results)
        m.sent = f"16 x {size / MB:.1f} MB"
        m.answer = f"{loaded} replaying, {16 - loaded} refused ({next((r[0] for r in results if 'Replaying' not in r[0]), '')})"
        clients = [r[1] for r in results]  # the sessions stay open while memory is read
    del clients


def sessions(app: App) -> None:
    """Sessions Gradio keeps (every output of every session until 10,000 of them), and files on disk."""
    with Measured(app, "sessions", "1,000 page loads from one address") as m:
        def load(n):
            session = f"load-{n}-{uuid.uuid4().hex[:6]}"
            request("GET", app.url + "/", headers={"X-Forwarded-For": "192.0.2.80"})
            reply = join(app, "on_first_view", [None, None], session, "192.0.2.80")
            return completion(app, session, 60) if reply.status == 200 else {"msg": short(reply)}

        with ThreadPoolExecutor(8) as pool:
            done = list(pool.map(load, range(1_000)))
        answered = sum(d.get("msg") == "process_completed" for d in done)
        refused = [d for d in done if d.get("msg") != "process_completed"]
        m.sent = "GET / and the first view's event, 1,000 sessions"
        m.answer = f"{answered} answered" + (f", {len(refused)} not ({refused[0]['msg'][:100]})" if refused else "")
    def twenty_files() -> bytes:  # each different (Gradio keeps one copy of a file it has already)
        chunk = os.urandom(4 * MB - 4096)
        parts = [b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"f%d.json\"\r\n"
                 b"Content-Type: application/json\r\n\r\n" % n + chunk + os.urandom(16) + b"\r\n" for n in range(20)]
        return b"".join(parts) + b"--b--\r\n"

    body = twenty_files()
    with Measured(app, "sessions", "one /upload of 20 files of 4 MB") as m:
        before = app.uploads_on_disk()
        reply = request("POST", app.url + "/gradio_api/upload", body, {
            "Content-Type": "multipart/form-data; boundary=b", "X-Forwarded-For": "192.0.2.81"}, timeout=120)
        after = app.uploads_on_disk()
        m.sent = f"{len(body) / MB:.0f} MB in 20 files"
        m.answer = f"{short(reply)}; on disk after: {after[0] - before[0]} files, {after[1] - before[1]:.0f} MB"
    with Measured(app, "sessions", "ten such uploads from ten addresses") as m:
        bodies = [twenty_files() for _ in range(10)]
        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda n: request("POST", app.url + "/gradio_api/upload", bodies[n], {
                "Content-Type": "multipart/form-data; boundary=b", "X-Forwarded-For": f"192.0.2.{90 + n}"},
                timeout=120), range(10)))
        after = app.uploads_on_disk()
        m.sent = f"10 x {len(body) / MB:.0f} MB"
        m.answer = f"{sum(r.status == 200 for r in replies)} accepted; on disk: {after[0]} files, {after[1]:.0f} MB"


LONG_PROMPT = json.dumps({"messages": [{"role": "user", "content": "Repeat this forever: " + "tick tock " * 2_000}]})


def long_run(app: App) -> list:
    from specviz.lab.public_policy import MAX_NEW_TOKENS

    return app.data_for("run", max_new_tokens=MAX_NEW_TOKENS, prompt=LONG_PROMPT)


def burst(app: App, count: int, sessions: int, address: str) -> list[Reply]:
    """count joins of the longest Run at once from address, spread over sessions."""
    run = long_run(app)
    barrier = threading.Barrier(count)

    def one(n):
        barrier.wait()
        return join(app, "run", run, f"burst-{address.replace('.', '-')}-{n % sessions}", address)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def burst64(app: App) -> None:
    """Fair share: a burst of joins from one address (the door read Gradio's pending map, which changes later)."""
    with Measured(app, "burst64", "a burst of 64 joins from one address in 8 sessions") as m:
        replies = burst(app, 64, 8, "192.0.2.100")
        refused = [r for r in replies if r.status != 200]
        m.sent = "64 x /run (512 tokens, longest prompt) at once"
        m.answer = f"{len(replies) - len(refused)} admitted, {len(refused)} refused" + \
            (f" ({refused[0].status} {refused[0].head[:100]})" if refused else "")


def burst120(app: App) -> None:
    """A burst of 120 joins took every place of the public queue: a newcomer then found it full."""
    with Measured(app, "burst120", "a burst of 120 joins from one address in 120 sessions, then a newcomer") as m:
        replies = burst(app, 120, 120, "192.0.2.101")
        newcomer = join(app, "step", app.data_for("step", max_new_tokens=4), "newcomer", "192.0.2.102")
        m.sent = "120 x /run at once"
        m.answer = f"{sum(r.status == 200 for r in replies)} admitted; the newcomer's join: {short(newcomer)}"


def crowd(app: App) -> None:
    """40 long Runs from 20 addresses (each within its own share), then an honest visitor's Step."""
    run = long_run(app)
    with Measured(app, "crowd", "40 long Runs from 20 addresses, then an honest Step", honest=True) as m:
        def one(n):
            return join(app, "run", run, f"crowd-{n}", f"192.0.2.{110 + n // 2}")

        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(one, range(40)))
        for n in range(40):
            threading.Thread(target=completion, args=(app, f"crowd-{n}", 900), daemon=True).start()
        deadline = time.monotonic() + 600  # the honest visitor's Step runs in Measured's thread: its first answer
        while not m.honest_seen and time.monotonic() < deadline:
            time.sleep(1)
        m.sent = "40 x /run (512 tokens, longest prompt)"
        m.answer = f"{sum(r.status == 200 for r in replies)} admitted; first honest Step: {m.honest_seen[:1]}"


def forwarded(app: App) -> None:
    """X-Forwarded-For from a client that is not the proxy (this app trusts no proxy: run it without one)."""
    run = app.data_for("run", max_new_tokens=64)
    with Measured(app, "forwarded", "40 joins from one client, each naming another address") as m:
        replies = [join(app, "run", run, f"xff-{n}", f"203.0.113.{n}") for n in range(40)]
        m.sent = "X-Forwarded-For: 203.0.113.N on each join, from 127.0.0.1, no proxy trusted"
        m.answer = f"{sum(r.status == 200 for r in replies)} admitted (one address's share: 16)"


def churn(app: App, addresses: int = 1) -> None:
    """New sessions while others' events wait: Gradio's 2,000-session map of outgoing messages evicts a waiting
    session, and its queue stops."""
    run = long_run(app)
    counters = app.data_for("counters")
    what = "one address" if addresses == 1 else f"{addresses} addresses"
    with Measured(app, "churn", f"2,100 new sessions from {what} while Runs wait") as m:
        # the model's places taken and events waiting behind them (in sessions the churn then pushes out)
        for n in range(6):
            join(app, "run", run, f"waiting-{n}", f"192.0.2.{130 + n}")
        stats = {"joined": 0, "refused": 0, "first_refusal": ""}
        started = time.monotonic()

        def one(n):
            session = f"churn-{n}-{uuid.uuid4().hex[:8]}"
            reply = join(app, "counters", counters, session, f"198.51.100.{n % addresses}")
            if reply.status == 200:
                stats["joined"] += 1
                completion(app, session, 30)
            else:
                stats["refused"] += 1
                stats["first_refusal"] = stats["first_refusal"] or short(reply)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(2_100)))
        churn_s = time.monotonic() - started
        waited = [outcome_of(completion(app, f"waiting-{n}", 900)) for n in range(6)]
        later = [join(app, "counters", counters, f"later-{n}", f"192.0.2.{150 + n}") for n in range(3)]
        m.sent = f"2,100 sessions in {churn_s:.0f} s ({stats['joined']} joined, {stats['refused']} refused " \
                 f"{stats['first_refusal'][:80]})"
        m.answer = f"waiting Runs: {waited[:2]}...; later visitors' joins: {[short(r)[:80] for r in later]}"
    with Measured(app, "churn", "an honest Step after the churn") as m:
        result = honest_step(app.url, timeout=120)
        m.sent, m.answer = "/step", f"{result.seconds:.1f} s {result.error or 'answered'}"


GROUPS = {"answers": answers, "malformed": malformed, "bodies": bodies, "memory": memory, "sessions": sessions,
          "burst64": burst64, "burst120": burst120, "crowd": crowd,
          "forwarded": forwarded, "churn": churn, "churn_many": lambda app: churn(app, addresses=70)}


def main() -> None:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a killed report stops its server too (finally below)
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=7874)
    parser.add_argument("--only", default=",".join(GROUPS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path, help="a folder to keep each group's server log in")
    parser.add_argument("--app-root", type=Path, default=ROOT,
                        help="the checkout whose app.py to attack (a copy of the code before a change, for its figures)")
    args = parser.parse_args()
    for name in args.only.split(","):
        app = App(args.port, trust_loopback=name != "forwarded", root=args.app_root)
        print(f"[{name}] server up and warm: {app.rss:.0f} MB resident", flush=True)
        try:
            GROUPS[name](app)
            if not app.alive():
                print(f"[{name}] the server died", flush=True)
        finally:
            app.stop(args.logs / f"{name}.log" if args.logs else None)
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in ROWS], indent=1, default=str))


if __name__ == "__main__":
    main()
