"""No fork while this process computes on its CPUs: ZeroGPU starts its GPU workers by forking this process, and a
child forked while another thread computes inherits that thread's locks as they were (held, for good) and an
OpenMP pool whose threads it does not have. So CPU work (a call of a model placed on the Space's CPUs, the start-up's
warm-up) holds the guard shared, and a GPU call holds it alone until its first reply, by when its worker is forked.
A GPU call therefore waits for the CPU work under way, and CPU work waits at most for one GPU call's first reply."""

from __future__ import annotations

import threading
from contextlib import contextmanager


class ForkGuard:
    def __init__(self):
        self._condition = threading.Condition()
        self._computing = 0
        self._forking = False

    @contextmanager
    def computing(self):
        """CPU work: many at once, never while a fork is under way."""
        with self._condition:
            self._condition.wait_for(lambda: not self._forking)
            self._computing += 1
        try:
            yield
        finally:
            with self._condition:
                self._computing -= 1
                self._condition.notify_all()

    @contextmanager
    def forking(self):
        """A GPU call's start: alone, once the CPU work under way has finished."""
        with self._condition:
            self._condition.wait_for(lambda: not self._forking and self._computing == 0)
            self._forking = True
        try:
            yield
        finally:
            with self._condition:
                self._forking = False
                self._condition.notify_all()


GUARD = ForkGuard()
