"""Whether a draft stage pays (unified's model stage, `model_stage=auto`), judged by what it added on the steps it ran.

Comparing the committed tokens per millisecond of steps with and without the stage compares different stretches of
the text: a stage tried while the prompt was being copied looked good for a whole Run, and the page's default prompt
paid it 5 ms a step for nothing (docs/benchmarks.md, issue 70). Here a step that ran the stage says what the stage
added: the accepted drafts from the first node on the accepted path that only the stage (or a source seeded by it)
offered, which without it would have ended the step there with the target's own token. Its cost is its drafting
plus the verify forward of the nodes that only it brought (the calibrated curve's difference). The same step without
both is the run's rate without the stage. The stage runs when what it adds per millisecond beats that rate:
(T + g) / (t + c) > T / t exactly when g / c > T / t.

The stage's gains are kept per process and setting (sessions share them, as drafters.measured_choice's rates are);
the run's rate without it is the session's own recent steps. Once the stage is measured not to pay, it runs one step
now and then, priced so that exploring costs at most EXPLORE_SHARE of the time."""

from __future__ import annotations

import os
import threading
from collections import deque

from specviz.drafters.measured_choice import priced_interval, tokens_per_ms
from specviz.records.notes import MeasuredChoice
from specviz.tree.draft_tree import DraftTree

ADDS, WITHOUT = "stage adds", "run without it"  # the report's two rates (MeasuredChoice.tokens_per_s keys)

_gains: dict[str, deque] = {}          # setting key -> recent (tokens the stage added, ms it cost) of steps it ran
_since_explore: dict[str, int] = {}    # setting key -> steps without the stage since it last ran
_recent: dict[str, deque] = {}         # setting key -> the latest session's recent (tokens, ms) without the stage
_lock = threading.RLock()


def _fresh_lock_in_a_fork() -> None:  # runtime.shared_resources says why
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock_in_a_fork)


def stage_added(tree: DraftTree, path: list[int], own: frozenset[str]) -> tuple[int, int]:
    """(accepted drafts only the stage made possible, nodes of the tree only it brought): a node is the stage's when
    every source that offered it is one of `own` (the stage's source, and sources seeded by it)."""
    theirs = [node for node in range(1, len(tree)) if tree.sources[node] and tree.sources[node] <= own]
    mine = set(theirs)
    first = next((i for i, node in enumerate(path) if node in mine), len(path))
    return len(path) - first, len(theirs)


class StageGain:
    def __init__(self, mode: str = "auto", setting: str = "", first_tries: int = 2, explore_every: int = 30,
                 window: int = 16, recent_steps: int = 8):
        self.mode, self.first_tries, self.explore_every = mode, first_tries, explore_every
        self.key, self.window = f"{setting}|stage", window
        with _lock:
            _gains.setdefault(self.key, deque(maxlen=window))
            _since_explore.setdefault(self.key, 0)
            # a new session starts from the latest one's speed, then measures its own
            self.recent: deque = deque(_recent.get(self.key, ()), maxlen=recent_steps)

    @property
    def gains(self) -> deque:
        """This process's (tokens added, ms) of the stage's recent steps in this setting, read by key (a gate carried
        into another process reads that process's)."""
        with _lock:
            return _gains.setdefault(self.key, deque(maxlen=self.window))

    def stage_rate(self) -> float | None:
        """Tokens the stage added per millisecond it cost, over its recent steps (None: not tried yet)."""
        return tokens_per_ms(self.gains)

    def run_rate(self) -> float | None:
        """The run's committed tokens per millisecond without the stage, over its recent steps."""
        return tokens_per_ms(self.recent)

    def explore_interval(self) -> int:
        """Steps between two tries of a stage measured not to pay: what a try loses (its cost beyond what the run
        needs for the tokens it adds) is at most EXPLORE_SHARE of the time of those steps."""
        gains, run_rate = self.gains, self.run_rate()
        cost_ms = sum(ms for _, ms in gains) / len(gains)
        lost_ms = cost_ms - (sum(t for t, _ in gains) / len(gains)) / max(1e-9, run_rate)
        return priced_interval(lost_ms, sum(ms for _, ms in self.recent) / len(self.recent), self.explore_every)

    def choose(self) -> str:
        if self.mode != "auto":
            return self.mode
        if len(self.gains) < self.first_tries or self.run_rate() is None:
            return "on"
        if self.stage_rate() > self.run_rate():
            return "on"
        with _lock:
            _since_explore[self.key] = _since_explore.get(self.key, 0) + 1
            if _since_explore[self.key] < self.explore_interval():
                return "off"
            _since_explore[self.key] = 0
        return "on"

    def observe(self, ran: bool, tokens: int, step_ms: float, added: int = 0, stage_ms: float = 0.0,
                load: float = 1.0) -> None:
        """A step that committed `tokens` in step_ms (draft and verify forward); where the stage ran, `added` of them
        were its and stage_ms its cost. Times are divided by the step's load (its forward against the calibrated
        curve), so a burst of machine load does not condemn the stage or flatter it."""
        with _lock:
            if ran:
                self.gains.append((added, stage_ms / load))
            self.recent.append((tokens - added, max(1e-3, step_ms - stage_ms) / load))
            _recent[self.key] = self.recent  # the next session of the setting starts from a copy of it

    def checkpoint(self):
        with _lock:
            return _since_explore.get(self.key, 0), list(self.gains), list(self.recent)

    def rollback(self, saved) -> None:
        since_explore, gains, recent = saved
        with _lock:
            _since_explore[self.key] = since_explore
            self.gains.clear()
            self.gains.extend(gains)
            self.recent.clear()
            self.recent.extend(recent)

    def report(self) -> MeasuredChoice:
        stage, run = self.stage_rate(), self.run_rate()
        explore_every = None
        if self.mode == "auto" and len(self.gains) >= self.first_tries and run is not None and stage <= run:
            explore_every = self.explore_interval()
        return MeasuredChoice(mode=self.mode, tokens_per_s={
            ADDS: None if stage is None else round(1000 * stage, 2),
            WITHOUT: None if run is None else round(1000 * run, 2)}, explore_every=explore_every)
