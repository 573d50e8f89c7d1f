"""A choice between kinds of step (ReSpec's fallback: the draft model or the copy-logit tree; unified's
model stage: run it or not), fixed by the user or (auto) the kind that has given more committed tokens
per millisecond of its own steps (drafting + verify forward) on this machine. The measurements are kept
per process and setting (target, draft model, device, drafter settings), so every session of the app or
a benchmark learns from the earlier ones instead of paying the exploration again. Each kind is tried
twice first; after that the other kind gets one step in every `explore_every`, so a changed machine load
can still flip the choice."""

from __future__ import annotations

import threading
from collections import deque

_measured: dict[str, dict[str, deque]] = {}   # setting key -> kind -> recent (tokens, ms) fallback steps
_measured_lock = threading.Lock()


class FallbackChooser:
    def __init__(self, mode: str = "auto", setting: str = "", window: int = 12, first_tries: int = 2,
                 explore_every: int = 30, kinds: tuple[str, ...] = ("model", "logits")):
        self.mode, self.first_tries, self.explore_every, self.kinds = mode, first_tries, explore_every, kinds
        with _measured_lock:
            self.samples = _measured.setdefault(f"{setting}|{'/'.join(kinds)}",
                                                {kind: deque(maxlen=window) for kind in kinds})
        self.steps = 0

    def rate(self, kind: str) -> float | None:
        """Committed tokens per millisecond over the kind's recent fallback steps."""
        samples = self.samples[kind]
        if not samples:
            return None
        return sum(t for t, _ in samples) / max(1e-6, sum(ms for _, ms in samples))

    def choose(self) -> str:
        if self.mode != "auto":
            return self.mode
        self.steps += 1
        untried = [k for k in self.kinds if len(self.samples[k]) < self.first_tries]
        if untried:
            return min(untried, key=lambda k: len(self.samples[k]))
        best = max(self.kinds, key=lambda k: self.rate(k))
        if self.steps % self.explore_every == 0:
            return next(k for k in self.kinds if k != best)
        return best

    def observe(self, kind: str, tokens: int, ms: float) -> None:
        with _measured_lock:
            self.samples[kind].append((tokens, ms))

    def checkpoint(self):
        with _measured_lock:
            return self.steps, {kind: list(samples) for kind, samples in self.samples.items()}

    def rollback(self, saved) -> None:
        self.steps, kept = saved
        with _measured_lock:
            for kind, samples in kept.items():
                self.samples[kind].clear()
                self.samples[kind].extend(samples)

    def report(self) -> dict:
        return {"mode": self.mode, "tokens_per_s": {k: None if self.rate(k) is None else round(1000 * self.rate(k), 2)
                                                    for k in self.kinds}}
