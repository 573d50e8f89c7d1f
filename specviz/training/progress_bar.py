"""A text progress bar for long commands (train-head): what is done of a phase, and the time left at the rate so
far, written as a log line at most every few seconds (a log file reads it as well as a terminal)."""

from __future__ import annotations

import time
from typing import Callable

WIDTH = 24
EVERY_S = 5.0


class ProgressBar:
    def __init__(self, label: str, total: int, log: Callable[[str], None], every_s: float = EVERY_S):
        self.label, self.total, self.log, self.every_s = label, max(1, total), log, every_s
        self.done = 0
        self.started = self._shown = time.perf_counter()

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = time.perf_counter()
        if self.done == self.total or now - self._shown >= self.every_s:
            self._shown = now
            self.log(self.line(now))

    def line(self, now: float | None = None) -> str:
        now = time.perf_counter() if now is None else now
        elapsed = now - self.started
        share = self.done / self.total
        filled = round(WIDTH * share)
        left = elapsed / share - elapsed if share else float("nan")
        tail = "done" if self.done == self.total else (f"about {_clock(left)} left" if share else "starting")
        return (f"{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] {self.done}/{self.total}, "
                f"{_clock(elapsed)} so far, {tail}")


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"
