"""Whether a visitor's model call is running in this process, and since when none has: the start-up's background
work (the full calibration after the first step) runs only between visitors' calls and stops when one starts."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class CallActivity:
    """Counts the model calls running now (lab.model_calls.call holds one per call)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running = 0
        self._last_end = time.monotonic()

    @contextmanager
    def running(self):
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._last_end = time.monotonic()

    @property
    def busy(self) -> bool:
        return self._running > 0

    def idle_s(self) -> float:
        """Seconds since the last call ended (0 while one runs)."""
        with self._lock:
            return 0.0 if self._running else time.monotonic() - self._last_end


ACTIVITY = CallActivity()
