"""One thread runs the model's computations in a process that serves visitors: callers hand their work here and
wait for it. OpenMP (torch's and the native kernels') keeps a team of worker threads per thread that starts
parallel work; with several such threads (Gradio runs each handler on a worker of its own pool) their idle teams
throttle one another, and a verify forward of one token took 26.9 ms from a second thread where the first took
19.0 ([docs](../../docs/benchmarks.md#one-thread-computes)). A single thread that computes keeps the speed the
command line measures.

One job at a time, first in, first out, except where the running job lends the thread (`lend`, between a long
prompt's chunks): the jobs waiting then run to their end first, and the running one goes on where it was. A visitor's
Step waited behind a crowd's prefill for its whole turn (2-15 s, docs/hostile-round-three.md); now for a chunk."""

from __future__ import annotations

import queue
import sys
import threading
import time
from concurrent.futures import Future
from typing import Callable, TypeVar

T = TypeVar("T")


# Python's turn for a thread that holds the GIL while another waits for it (the interpreter's default is 5 ms). The
# compute thread gives the GIL up around every torch operation and waits for it again each time; beside a server
# thread busy in Python (Gradio copying a page's config, drawing a figure) it waited a whole default turn per
# operation: a 24-token unified Run took 30 s instead of 1.8 (2-core AMD EPYC, a deepcopy loop beside it), 10 s at
# 1 ms, 5.8 s at 0.1 ms, no faster below; quiet, the same 1.8 s at either (docs/hostile-round-three.md).
GIL_TURN_S = 0.0001


def short_gil_turns() -> None:
    """In a process that serves visitors: threads busy in Python hand the GIL to the compute thread within
    GIL_TURN_S."""
    sys.setswitchinterval(GIL_TURN_S)


class ComputeThread:
    def __init__(self, name: str = "specviz-compute"):
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._lending = False  # a lent job runs now (it does not lend in turn: one level, a bounded stack)

    def _loop(self) -> None:
        while True:
            self._do(*self._jobs.get())

    @staticmethod
    def _do(work, args, future: Future) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work(*args))
        except BaseException as error:  # noqa: BLE001 (the caller re-raises it in its own thread)
            future.set_exception(error)
        # nothing of a finished job stays reachable from here (its generator holds a visitor's session): the
        # arguments go with this frame

    def lend(self) -> float:
        """From the running job, at a point where it holds nothing another job needs (between a prefill's chunks,
        outside any forward): the jobs waiting now run to their end, then this one goes on; the seconds they took
        (0 when none waited, off the compute thread, or in a lent job)."""
        if threading.current_thread() is not self._thread or self._lending or self._jobs.empty():
            return 0.0
        began = time.perf_counter()
        self._lending = True
        try:
            for _ in range(self._jobs.qsize()):  # those waiting now: one that comes meanwhile waits for the next
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                self._do(*job)
                del job
        finally:
            self._lending = False
        return time.perf_counter() - began

    def run(self, work: Callable[..., T], *args) -> T:
        """work(*args) on the compute thread (at once when called from it), its result or its exception here."""
        if threading.current_thread() is self._thread:
            return work(*args)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        future: Future = Future()
        self._jobs.put((work, args, future))
        return future.result()


COMPUTE = ComputeThread()
