"""The page's Run against `bench`, example by example, taken in turns on one machine: issue 70 asks that the speedup
the page's counters read, in headless Chromium on the same cores, be within 10% of what `bench` measures for the same
prompt and method in one process. On a host whose speed drifts within minutes (docs/benchmarks.md), a bench taken
before the page Runs is no steady reference; here every example's page Run sits between two of its bench readings
(bench in this process while the server idles, then the page while this process idles, the order flipped each
round), so both see the same moment of the host.

Each page Run is the first Run after a page load: the page opened at `?example=...&method=...&max_new_tokens=...`
(a new session), Reset (the first touch stops the first visit's replay), Run, read back from the counters line."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlencode

from specviz.benches.app_load import Server, process_tree_cpu_s
from specviz.benches.browser_run import CHROMIUM, chromium_pids, counter_figures, open_ready_page, wait_for_run
from specviz.errors import SpecvizError

WITHIN = 0.10  # the tolerance: the page's speedup within 10% of bench's
QUIET_CPU_SHARE = 0.05  # a side starts once the server and the browser used under this share of one core for 0.5 s


@dataclass(frozen=True)
class ExampleReading:
    """One example's readings: every page Run's and every bench reading's speedup over ar, and the tokens each made."""
    example: str
    page: list[float]
    bench: list[float]
    page_tokens: list[int]
    bench_tokens: list[int]
    bench_mat: list[float]

    @property
    def page_median(self) -> float:
        return statistics.median(self.page)

    @property
    def bench_median(self) -> float:
        return statistics.median(self.bench)

    @property
    def page_over_bench(self) -> float:
        return self.page_median / self.bench_median

    @property
    def within(self) -> bool:
        return abs(self.page_over_bench - 1) <= WITHIN

    def to_dict(self) -> dict:
        return {"example": self.example, "page": self.page, "bench": self.bench, "page_tokens": self.page_tokens,
                "bench_tokens": self.bench_tokens, "bench_mat": self.bench_mat,
                "page_median": round(self.page_median, 3), "bench_median": round(self.bench_median, 3),
                "page_over_bench": round(self.page_over_bench, 3), "within_10_percent": self.within}


def bench_speedup(lm, item, method: str, max_new_tokens: int, repeats: int, draft, warm: bool) -> tuple[float, int, float]:
    """bench's speedup of `method` over ar on one suite item (its own interleaved repeats), its tokens and MAT."""
    from specviz.benches.suite_bench import run_bench

    report = run_bench(lm, [item], ["ar", method], max_new_tokens, repeats=repeats, draft=draft, warm=warm)
    row = next(r for r in report["prompts"] if r["method"] == method)
    return row["speedup"], row["new_tokens"], row["mat"]


def page_run(browser, url: str, example_id: str, method: str, max_new_tokens: int, watched: list[int],
             viewport: tuple[int, int] = (1440, 900), timeout_s: float = 300) -> dict:
    """The first Run after loading the page at the example's link, once the page's load is drawn (watched: the
    server's and the browser's processes); the counters' figures."""
    query = urlencode({"example": example_id, "method": method, "max_new_tokens": max_new_tokens})
    page, deadline = open_ready_page(browser, f"{url}?{query}", viewport, timeout_s)
    try:
        page.click("#reset-btn")
        time.sleep(1)
        settle(watched)
        page.click("#run-btn")
        figures = wait_for_run(page, max_new_tokens, deadline)
        if "speedup" not in figures:
            counters = counter_figures(page.text_content("#counters") or "")
            raise SpecvizError(f"no speedup on the page for {example_id}: {counters}")
        return figures
    finally:
        page.close()


def settle(pids: list[int], timeout_s: float = 15.0) -> float:
    """Wait until the server and the browser are quiet: a page Run's last frames are drawn after its counters are
    final (about 1.5 CPU-seconds of Chromium's), and a bench reading taken meanwhile had its first run's prefill
    at twice its time, which flattered bench's ratio. Returns the seconds waited."""
    started = time.perf_counter()
    before = sum(process_tree_cpu_s(pid) for pid in pids)
    while time.perf_counter() - started < timeout_s:
        time.sleep(0.5)
        now = sum(process_tree_cpu_s(pid) for pid in pids)
        if now - before < QUIET_CPU_SHARE * 0.5:
            break
        before = now
    return time.perf_counter() - started


def measure(lm, draft, items: list, method: str = "unified", max_new_tokens: int = 128, rounds: int = 2,
            bench_repeats: int = 2, env: dict | None = None,
            log: Callable[[str], None] = lambda line: None) -> list[ExampleReading]:
    """Per example (suite items the page offers), `rounds` page Runs and `rounds` bench readings, taken in turns."""
    from playwright.sync_api import sync_playwright

    readings = {item.id: {"page": [], "bench": [], "page_tokens": [], "bench_tokens": [], "bench_mat": []}
                for item in items}
    server = Server(env)
    try:
        server.wait_for("nothing left in the background", what="the server never went quiet")
        warm = True
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                watched = [server.process.pid, *chromium_pids()]
                for round_ in range(rounds):
                    for item in items:
                        got = readings[item.id]
                        for side in (("bench", "page") if round_ % 2 == 0 else ("page", "bench")):
                            settle(watched)
                            if side == "bench":
                                speedup, tokens, mat = bench_speedup(lm, item, method, max_new_tokens,
                                                                     bench_repeats, draft, warm)
                                warm = False
                                got["bench"].append(speedup)
                                got["bench_tokens"].append(tokens)
                                got["bench_mat"].append(mat)
                            else:
                                figures = page_run(browser, server.url, item.id, method, max_new_tokens, watched)
                                got["page"].append(figures["speedup"])
                                got["page_tokens"].append(int(figures.get("tokens", 0)))
                        log(f"round {round_ + 1} {item.id}: page {got['page'][-1]:.2f}x, bench {got['bench'][-1]:.2f}x")
            finally:
                browser.close()
    finally:
        server.close()
    return [ExampleReading(item.id, **readings[item.id]) for item in items]
