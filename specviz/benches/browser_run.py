"""A Run of the default prompt through the page in headless Chromium against the same Run through the API, on one
machine: the page's drawing shares the cores with the server (a teacher's laptop runs both). Reports each Run's
tokens/s and speedup over ar (the page's own counters), and the browser's CPU seconds per step (every Chromium
process's user + system time over the Run, from /proc)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from specviz.benches.app_load import Server, params_list, process_tree_cpu_s, step_settings
from specviz.errors import SpecvizError
from specviz.lab.startup import READY_LINE

CHROMIUM = "/usr/bin/chromium"


def counter_figures(counters_text: str) -> dict:
    """steps, tokens, tokens/s and the speedup over ar out of the counters line as the page shows it."""
    found = {}
    for key, pattern in (("steps", r"steps\**\s*(\d+)"), ("tokens", r"tokens\**\s*(\d+)"),
                         ("tokens_per_s", r"tokens/s\**\s*([\d.]+)"), ("speedup", r"speedup vs ar\**\s*([\d.]+)x"),
                         ("ar_tokens_per_s", r": ([\d.]+) tok/s;"), ("mean_accepted", r"mean accepted / step\**\s*([\d.]+)")):
        match = re.search(pattern, counters_text)
        if match:
            found[key] = float(match.group(1))
    return found


def api_run(url: str, prompt: str, method: str, max_new_tokens: int) -> dict:
    from gradio_client import Client

    client = Client(url, verbose=False)
    try:
        out = client.predict(**step_settings(params_list(), prompt, method, max_new_tokens), api_name="/run")
        counters = client.predict(api_name="/counters")
    finally:
        client.close()
    figures = counters["figures"]
    versus = counters.get("versus_ar") or {}
    return {"steps": figures["steps"], "tokens": figures["new_tokens"], "tokens_per_s": figures["tokens_per_s"],
            "speedup": versus.get("speedup"), "counters": out[2][:300] if isinstance(out, (list, tuple)) else ""}


def open_ready_page(browser, url: str, viewport: tuple[int, int] = (1440, 900), timeout_s: float = 300):
    """A new tab at url once its Run button is there and live steps are ready: (the page, the deadline its Run has)."""
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    page.goto(url, wait_until="load")
    page.wait_for_selector("#run-btn", timeout=60_000)
    deadline = time.time() + timeout_s
    while READY_LINE not in (page.text_content("#live-status") or ""):
        if time.time() > deadline:
            page.close()
            raise SpecvizError("live steps never became ready")
        time.sleep(0.5)
    return page, deadline


def browser_run(url: str, method: str, max_new_tokens: int, viewport: tuple[int, int] = (1440, 900),
                timeout_s: float = 300) -> dict:
    """The page's own Run button on its default prompt, read back from its counters line."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page, deadline = open_ready_page(browser, url, viewport, timeout_s)
            page.click("#reset-btn")   # the first touch stops the first visit's replay
            time.sleep(2)
            browser_pids = chromium_pids()
            cpu_before = sum(process_tree_cpu_s(p) for p in browser_pids)
            started = time.perf_counter()
            page.click("#run-btn")
            _run_ended(page, max_new_tokens, deadline)
            wall = time.perf_counter() - started
            cpu = sum(process_tree_cpu_s(p) for p in browser_pids) - cpu_before
            figures = counter_figures(page.text_content("#counters") or "")
        finally:
            browser.close()
    steps = figures.get("steps") or 1
    return {**figures, "browser_cpu_s": round(cpu, 2), "browser_cpu_ms_per_step": round(1000 * cpu / steps, 1),
            "wall_s": round(wall, 2)}


def first_runs(method: str = "unified", max_new_tokens: int = 128, waits_s: tuple[float, ...] = (0.0, 90.0),
               env: dict | None = None, viewport: tuple[int, int] = (1440, 900)) -> list[dict]:
    """As a newcomer meets the page: per fresh server process, the page loaded `wait` seconds after the process
    started (0: as soon as live steps are ready), Run on its default prompt, Reset, Run again; per Run the counters'
    figures (tokens, steps, tokens/s, the speedup over the ar stepped beside it) and the breakdown behind them."""
    from playwright.sync_api import sync_playwright

    rows = []
    for wait in waits_s:
        server = Server(env)
        started = time.time()
        try:
            server.wait_for("live steps ready", what="live steps never became ready")
            time.sleep(max(0.0, started + wait - time.time()))
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                try:
                    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
                    page.goto(server.url, wait_until="load")
                    page.wait_for_selector("#run-btn", timeout=60_000)
                    for run in ("first", "second"):
                        if run == "second":
                            page.click("#reset-btn")
                            time.sleep(2)
                        loaded_s = time.time() - started
                        page.click("#run-btn")
                        figures = wait_for_run(page, max_new_tokens, time.time() + 300)
                        breakdown = page.text_content("#counters details") or ""
                        rows.append({"run": run, "after_start_s": round(loaded_s, 1), **figures,
                                     "breakdown": " ".join(breakdown.split())})
                finally:
                    browser.close()
        finally:
            server.close()
    return rows


def _run_ended(page, max_new_tokens: int, deadline: float) -> bool:
    """Whether the Run's last reply came before the deadline (Done, or the token limit, or nothing new for 8 s)."""
    last, still_since = "", time.time()
    while time.time() < deadline:
        text = page.text_content("#counters") or ""
        figures = counter_figures(text)
        if text != last:
            last, still_since = text, time.time()
        done = (page.text_content("#message") or "").strip().startswith("Done")
        if figures.get("tokens", 0) >= max_new_tokens or done or (figures.get("steps") and time.time() - still_since > 8):
            return True
        time.sleep(0.25)
    return False


def wait_for_run(page, max_new_tokens: int, deadline: float) -> dict:
    """The counters' figures once the Run's last reply came (_run_ended)."""
    if not _run_ended(page, max_new_tokens, deadline):
        raise SpecvizError("the Run did not finish within 300 s")
    time.sleep(1.0)  # the last reply's counters (the figures below the stage follow it)
    return counter_figures(page.text_content("#counters") or "")


def chromium_pids() -> list[int]:
    """Chromium's top processes (the headless shell and its children are summed by _tree_cpu_s)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if "chrom" in Path(command).name:
                try:
                    parent_command = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")[0].decode()
                except OSError:
                    parent_command = ""
                if "chrom" not in Path(parent_command).name:
                    found.append(int(entry.name))
    return found


def measure(method: str = "unified", max_new_tokens: int = 128, repeats: int = 3, env: dict | None = None) -> dict:
    """Interleaved API and browser Runs of the page's default prompt on one server; medians and every run."""
    import statistics

    from specviz.lab.first_visit import first_view
    from specviz.lab.public_policy import Policy
    from specviz.panels.page_context import PageContext

    context = PageContext.of(Policy.private())  # the prompt the page opens with (the browser's Run uses it)
    prompt = first_view(context.traces.get(context.first_trace), context.first_trace, context.examples).prompt
    server = Server(env)
    try:
        server.wait_for("live steps ready", what="live steps never became ready")
        server.wait_for("nothing left in the background")
        runs = {"api": [], "browser": []}
        for _ in range(repeats):
            runs["api"].append(api_run(server.url, prompt, method, max_new_tokens))
            runs["browser"].append(browser_run(server.url, method, max_new_tokens))
    finally:
        server.close()
    median = {side: {key: statistics.median([r[key] for r in rs if r.get(key) is not None])
                     for key in ("tokens_per_s", "speedup", "steps", "browser_cpu_ms_per_step")
                     if any(r.get(key) is not None for r in rs)} for side, rs in runs.items()}
    return {"method": method, "max_new_tokens": max_new_tokens, "median": median, "runs": runs}
