"""A choice between two kinds of step (ReSpec's fallback: the draft model or the copy-logit tree; unified's model
stage: run it or not), fixed by the user or, with `auto`, the kind that has committed more tokens per millisecond of
its own steps on this machine.

Measurements and the step count are kept per process and setting, so sessions share one exploration schedule;
exploring the worse kind costs at most EXPLORE_SHARE of the process's time. A step's time is divided by its load, so
that a burst of machine load does not condemn a kind.

Design notes: docs/design.md, "specviz/drafters/measured_choice.py"."""

from __future__ import annotations

import os
import threading
from collections import deque

from specviz.records.notes import MeasuredChoice

_measured: dict[str, dict[str, deque]] = {}   # setting key -> kind -> recent (tokens, ms) fallback steps
_since_explore: dict[str, int] = {}            # setting key -> auto choices since the last exploring step
_measured_lock = threading.RLock()  # samples (read under it) is asked for inside it


def _fresh_lock_in_a_fork() -> None:  # runtime.shared_resources says why
    global _measured_lock
    _measured_lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock_in_a_fork)
EXPLORE_SHARE = 0.01  # at most this share of the time goes to steps of a kind measured to be worse


def tokens_per_ms(samples) -> float | None:
    """Tokens per millisecond over (tokens, ms) samples (None: none yet)."""
    if not samples:
        return None
    return sum(t for t, _ in samples) / max(1e-6, sum(ms for _, ms in samples))


def priced_interval(lost_ms: float, step_ms: float, at_least: int) -> int:
    """Steps between two exploring steps that lose lost_ms each, so that they cost at most EXPLORE_SHARE of steps of
    step_ms (at least `at_least` steps apart)."""
    if lost_ms <= 0:
        return at_least
    return max(at_least, round(lost_ms / (EXPLORE_SHARE * step_ms)))


class FallbackChooser:
    def __init__(self, mode: str = "auto", setting: str = "", window: int = 12, first_tries: int = 2,
                 explore_every: int = 30, kinds: tuple[str, ...] = ("model", "logits")):
        self.mode, self.first_tries, self.explore_every, self.kinds = mode, first_tries, explore_every, kinds
        self.key, self.window = f"{setting}|{'/'.join(kinds)}", window
        with _measured_lock:
            _measured.setdefault(self.key, {kind: deque(maxlen=window) for kind in kinds})
            _since_explore.setdefault(self.key, 0)

    @property
    def samples(self) -> dict[str, deque]:
        """This process's measurements of the setting, read by key (a chooser carried into another process in
        a session state reads that process's, not a copy of the one it was made in)."""
        with _measured_lock:
            return _measured.setdefault(self.key, {kind: deque(maxlen=self.window) for kind in self.kinds})

    def rate(self, kind: str) -> float | None:
        """Committed tokens per millisecond (at the calibrated machine speed) over the kind's recent steps."""
        return tokens_per_ms(self.samples[kind])

    def _mean_ms(self, kind: str) -> float:
        samples = self.samples[kind]
        return sum(ms for _, ms in samples) / len(samples)

    def explore_interval(self, best: str, other: str) -> int:
        """Steps between two exploring steps of `other`: its measured loss against `best` (the time beyond
        what best needs for the same tokens) is at most EXPLORE_SHARE of the time of those steps."""
        other_tokens = sum(t for t, _ in self.samples[other]) / len(self.samples[other])
        lost_ms = self._mean_ms(other) - other_tokens / max(1e-9, self.rate(best))
        return priced_interval(lost_ms, self._mean_ms(best), self.explore_every)

    def choose(self) -> str:
        if self.mode != "auto":
            return self.mode
        untried = [k for k in self.kinds if len(self.samples[k]) < self.first_tries]
        if untried:
            return min(untried, key=lambda k: len(self.samples[k]))
        best = max(self.kinds, key=lambda k: self.rate(k))
        other = next(k for k in self.kinds if k != best)
        with _measured_lock:
            _since_explore[self.key] = _since_explore.get(self.key, 0) + 1
            if _since_explore[self.key] < self.explore_interval(best, other):
                return best
            _since_explore[self.key] = 0
        return other

    def observe(self, kind: str, tokens: int, ms: float, load: float = 1.0) -> None:
        """tokens committed by a step of this kind that took ms, its forward `load` times the curve's."""
        with _measured_lock:
            self.samples[kind].append((tokens, ms / load))

    def checkpoint(self):
        with _measured_lock:
            return _since_explore.get(self.key, 0), {kind: list(samples) for kind, samples in self.samples.items()}

    def rollback(self, saved) -> None:
        since_explore, kept = saved
        with _measured_lock:
            _since_explore[self.key] = since_explore
            for kind, samples in kept.items():
                self.samples[kind].clear()
                self.samples[kind].extend(samples)

    def report(self) -> MeasuredChoice:
        rates = {k: self.rate(k) for k in self.kinds}  # once each: the report is written every step
        tokens_per_s = {k: None if rate is None else round(1000 * rate, 2) for k, rate in rates.items()}
        explore_every = None
        if self.mode == "auto" and all(len(self.samples[k]) >= self.first_tries for k in self.kinds):
            best = max(self.kinds, key=rates.__getitem__)
            explore_every = self.explore_interval(best, next(k for k in self.kinds if k != best))
        return MeasuredChoice(mode=self.mode, tokens_per_s=tokens_per_s, explore_every=explore_every)
