"""The app under load and over time, measured from outside: a real `python app.py` server driven through
gradio_client. concurrency: N visitors at once, each its own prompt, each output checked against plain
greedy decoding of its prompt (no cross-talk), the time each request waited. memory: the server's resident
memory while one visitor steps thousands of times (with resets) and while hundreds of visitors open a
session and abandon it."""

from __future__ import annotations

import html
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from specviz.errors import SpecvizError

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python app.py` on a free port, in its own process (its memory is what we read)."""

    def __init__(self, env: dict | None = None, timeout_s: float = 300):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.process = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(self.port)],
                                        cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + timeout_s
        while not any("loaded on" in line for line in self.log):  # the page is up before the model: wait for both
            if self.process.poll() is not None or time.time() > deadline:
                self.close()
                raise SpecvizError("The app did not start:\n" + "".join(self.log[-20:]))
            time.sleep(0.2)

    def _read(self):
        for line in self.process.stdout:
            self.log.append(line)

    def wait_for(self, mark: str, timeout_s: float = 600, what: str | None = None) -> bool:
        """Wait until a line of the server's log holds `mark`; past timeout_s, raise (what: the message's subject)
        or, what=None, return False."""
        deadline = time.time() + timeout_s
        while not any(mark in line for line in self.log):
            if time.time() > deadline:
                if what is None:
                    return False
                raise SpecvizError(f"{what} ({mark!r} never came)")
            time.sleep(0.5)
        return True

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def step_settings(app_params: list, prompt: str, method: str = "racer", max_new_tokens: int = 32) -> dict:
    """The /step and /run named inputs: max new tokens, the run settings, every method parameter at its default."""
    return {"max_new_tokens": max_new_tokens, "model": "", "draft_model": "", "mode": "", "prompt": prompt,
            "method": method, "auto_budget": True, "budget": 16, "temperature": 0.0, "top_p": 1.0, "seed": 0,
            **{p.name: p.default for p in app_params}}


def greedy_texts(lm, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Plain greedy decoding of each prompt, in this process, as the page shows its tokens (each token's own
    text, joined): what each visitor's output must be."""
    from specviz.engine.run import run_method
    from specviz.engine.session import TokenTexts

    texts = TokenTexts(lm.tokenizer)
    return ["".join(texts(t) for t in run_method(lm, "ar", prompt, max_new_tokens=max_new_tokens).output_ids)
            for prompt in prompts]


def text_of(generated_html: str) -> str:
    """The generated text out of the page's token HTML."""
    body = generated_html.split('<div class="generated">', 1)[-1]
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def params_list() -> list:
    from specviz.methods import METHODS

    return list({p.name: p for m in METHODS.values() for p in m.params}.values())


def run_concurrency(url: str, prompts: list[str], expected: list[str], method: str = "racer",
                    max_new_tokens: int = 32) -> list[dict]:
    """One gradio_client per prompt, all submitted at once; per visitor: latency, its own compute time (from
    its counters), the wait (latency - compute), and whether its text is its prompt's greedy text."""
    from gradio_client import Client

    params = params_list()
    clients = [Client(url, verbose=False) for _ in prompts]
    started = time.perf_counter()
    jobs = [c.submit(**step_settings(params, p, method, max_new_tokens), api_name="/run")
            for c, p in zip(clients, prompts)]
    rows = []
    for job, want in zip(jobs, expected):
        out = job.result(timeout=900)
        done = time.perf_counter()
        counters = out[2]
        own = float(re.search(r"\*\*tokens/s\*\* ([\d.]+)", counters).group(1))
        tokens = int(re.search(r"\*\*tokens\*\* (\d+)", counters).group(1))
        compute = tokens / own if own else 0.0
        rows.append({"latency_s": round(done - started, 2), "compute_s": round(compute, 2),
                     "waited_s": round(done - started - compute, 2), "tokens": tokens,
                     "same_as_greedy": text_of(out[1]) == want, "identical_to_ar": "identical to greedy ar" in counters})
    return rows


def run_memory(server: Server, steps: int = 5000, sessions: int = 200, prompt: str = "Tell me about lighthouses.",
               ttl_s: float = 0.0, log: Callable[[str], None] = print) -> dict:
    """RSS of the server: at start, while one client steps `steps` times (Reset when a generation ends), and
    while `sessions` clients each make one step and drop their connection; then once Gradio has noticed."""
    from gradio_client import Client

    params = params_list()
    report = {"start_mb": round(server.rss_mb(), 1), "steps": [], "sessions": []}
    client = Client(server.url, verbose=False)
    settings = step_settings(params, prompt, "racer", 1024)
    for n in range(1, steps + 1):
        out = client.predict(**settings, api_name="/step")
        if "finished" in out[7] or "raise the limit" in out[7]:
            client.predict(api_name="/reset")
        if n % max(1, steps // 4) == 0:
            report["steps"].append((n, round(server.rss_mb(), 1)))
            log(f"{n} steps: {report['steps'][-1][1]} MB")
    for n in range(1, sessions + 1):
        visitor = Client(server.url, verbose=False)
        visitor.predict(**step_settings(params, f"{prompt} ({n})", "racer", 8), api_name="/step")
        visitor.close()  # abandoned: no reset, the connection just drops (a closed tab)
        if n % max(1, sessions // 4) == 0:
            report["sessions"].append((n, round(server.rss_mb(), 1)))
            log(f"{n} abandoned sessions: {report['sessions'][-1][1]} MB")
    # Gradio notices a dropped connection at its next heartbeat (15 s); a session still connected is
    # released after its time to live
    time.sleep(max(ttl_s, 20) + 5)
    report["after_mb"] = round(server.rss_mb(), 1)
    log(f"{max(ttl_s, 20) + 5:g} s later: {report['after_mb']} MB")
    return report


def time_replay(path: Path) -> dict:
    """Seconds to load a trace and show its last step, and to walk every step of it as Play does (each
    step's full page: tree, text so far, counters, panels), in this process, with no model."""
    from specviz.lab.lab import Lab
    from specviz.lab.public_policy import Policy
    from specviz.panels.page import build_page
    from specviz.panels.page_context import PageContext

    page = build_page(PageContext.of(Policy.private()))  # the page's own output mapping
    lab = Lab()
    started = time.perf_counter()
    lab.load_trace(path)
    page.out.shown(lab)
    loaded = time.perf_counter() - started
    lab.go_to(0)
    walk_started = time.perf_counter()
    lab.play()
    while True:
        page.out.shown(lab)
        if not lab.tick(10**9):
            break
    walked = time.perf_counter() - walk_started
    steps = len(lab.replay.steps)
    started = time.perf_counter()
    page.accounting.on_accounting(None, lab)
    plots = time.perf_counter() - started
    return {"steps": steps, "bytes": path.stat().st_size, "load_and_show_s": round(loaded, 3),
            "walk_all_steps_s": round(walked, 2), "ms_per_step_view": round(1000 * walked / steps, 1),
            "accounting_plots_s": round(plots, 3)}


def process_tree_cpu_s(root_pid: int) -> float:
    """User + system seconds of root_pid and every process below it (the browser's renderer, GPU and utility
    processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [root_pid]
    ticks = os.sysconf("SC_CLK_TCK")
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except OSError:
            pass
        todo.extend(children.get(pid, []))
    return total


def measure_startup(env: dict | None = None, prompt: str = "Say hello in three languages.",
                    timeout_s: float = 900, app: Path = ROOT / "app.py", quiet_timeout_s: float = 900) -> dict:
    """A fresh `python app.py` (give SPECVIZ_CACHE a new folder for a cold start): seconds from starting the
    process to the first page served, to the first live step a visitor gets back (a /step sent as soon as the
    page is up, with the page's default method), to the start-up's own "live steps ready" line, and to a quiet
    machine (its "nothing left in the background" line); and the CPU seconds the server spent between its first
    step and that line, and in the 30 s after it (nothing may keep the cores busy behind the visitor)."""
    import urllib.request

    from gradio_client import Client


    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(app), "--port", str(port)], cwd=app.parent,
                               env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(iter(process.stdout.readline, "")), daemon=True).start()
    url = f"http://127.0.0.1:{port}/"

    def seen(*marks: str) -> str | None:
        return next((line.strip() for line in log if any(mark in line for mark in marks)), None)

    try:
        page_s = None
        while page_s is None:
            if process.poll() is not None or time.perf_counter() - started > timeout_s:
                raise SpecvizError("The app did not start:\n" + "".join(log[-20:]))
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        page_s = time.perf_counter() - started
            except OSError:
                time.sleep(0.1)
        client = Client(url, verbose=False)
        out = client.predict(prompt=prompt, max_new_tokens=8, api_name="/step")
        step_s = time.perf_counter() - started
        cpu_at_step = process_tree_cpu_s(process.pid)
        if "steps** 1" not in out[2]:
            raise SpecvizError(f"The first step failed: {out[7]}")
        while not seen("live steps ready", "warm-up failed") and time.perf_counter() - started < timeout_s:
            time.sleep(0.2)
        ready = seen("live steps ready", "warm-up failed") or ""
        cpu_at_ready = process_tree_cpu_s(process.pid)
        time.sleep(30)
        cpu_after_ready = process_tree_cpu_s(process.pid) - cpu_at_ready
        while not seen("nothing left in the background") and time.perf_counter() - started < quiet_timeout_s:
            time.sleep(0.2)
        quiet_s = time.perf_counter() - started if seen("nothing left in the background") else None
        cpu_at_quiet = process_tree_cpu_s(process.pid)
        time.sleep(30)
        cpu_after = process_tree_cpu_s(process.pid) - cpu_at_quiet
        client.close()
    finally:
        process.terminate()
        process.wait(30)
    return {"page_s": round(page_s, 2), "first_step_s": round(step_s, 2),
            "quiet_s": round(quiet_s, 2) if quiet_s is not None else None,
            "cpu_s_first_step_to_quiet": round(cpu_at_quiet - cpu_at_step, 1),
            "cpu_s_in_30_s_after_ready": round(cpu_after_ready, 1),
            "cpu_s_in_30_s_after_quiet": round(cpu_after, 2), "ready_line": ready,
            "background_lines": [line.strip() for line in log if "full cost curve" in line or "background" in line]}
