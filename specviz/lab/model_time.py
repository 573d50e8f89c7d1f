"""Each address's recent share of the model: the seconds its model calls ran, halved every HALF_LIFE_S (issue 73,
fair share under crowds). Gradio's queue serves the model's events of the address with the least of it first
(panels.queue_guard), and a long call yields at its contended deadline only to an address that has had less: a
visitor who asks for a Step now and then goes ahead of addresses that keep the model busy, however many there are,
and waits at most for the running calls' contended deadline."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Callable

HALF_LIFE_S = 60.0
MAX_ADDRESSES = 50_000  # addresses remembered (the oldest forgotten: a forgotten one starts again from nothing)


class ModelTime:
    def __init__(self, half_life_s: float = HALF_LIFE_S, clock: Callable[[], float] = time.monotonic):
        self.half_life_s, self.clock = half_life_s, clock
        self._used: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (seconds, as of when)
        self._running: dict[str, list[float]] = {}                         # address -> its running calls' starts
        self._lock = threading.Lock()

    def _decayed(self, address: str, now: float) -> float:
        seconds, at = self._used.get(address, (0.0, now))
        return seconds * math.exp2(-(now - at) / self.half_life_s)

    def started(self, address: str) -> float:
        """A model call of address starts now: its running time counts from here; the start, for finished()."""
        now = self.clock()
        with self._lock:
            self._running.setdefault(address, []).append(now)
        return now

    def finished(self, address: str, started: float) -> None:
        now = self.clock()
        with self._lock:
            starts = self._running.get(address, [])
            if started in starts:
                starts.remove(started)
            if not starts:
                self._running.pop(address, None)
            self._used[address] = (self._decayed(address, now) + max(0.0, now - started), now)
            self._used.move_to_end(address)
            while len(self._used) > MAX_ADDRESSES:
                self._used.popitem(last=False)

    def recent(self, address: str) -> float:
        """The address's decayed model seconds, with what its running calls have taken so far."""
        now = self.clock()
        with self._lock:
            return self._decayed(address, now) + sum(now - s for s in self._running.get(address, ()))
