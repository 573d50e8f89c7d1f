"""The server's event loop paced while model calls run (public mode; started by the queue guard on the loop).

Every request of every visitor is parsed, checked and answered in Python on the event loop's one thread, and the
model's calls (the compute thread, the events' worker threads) need the same interpreter lock. Under issue 73's
soak, a flood of requests on every route kept the loop holding the lock 75% of the time, and an honest visitor's
Step, half a second alone, took 8-9 s. While a model call runs, the loop here takes at most LOOP_SHARE of the
interpreter's time: after each PACE_S of its own work it blocks (the lock free) until its share is back within
bounds. Requests then wait a few milliseconds longer in the kernel's queues, a flood slows down with them, and the
model's calls get the rest. With no model call running, or a loop mostly idle, nothing changes."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

PACE_S = 0.02        # how often the loop measures its share
LOOP_SHARE = 0.25    # the most of the interpreter's time the loop takes while a model call runs
LONGEST_BLOCK_S = 0.05


def block_for(loop_cpu_s: float, elapsed_s: float, share: float = LOOP_SHARE) -> float:
    """How long the loop should block after using loop_cpu_s of CPU in elapsed_s of wall, so that its share over
    the whole (elapsed + block) is at most share; never more than LONGEST_BLOCK_S."""
    return min(LONGEST_BLOCK_S, max(0.0, loop_cpu_s / share - elapsed_s))


async def pace_loop(model_calls_running: Callable[[], int], block: Callable[[float], None] = time.sleep,
                    cpu_clock: Callable[[], float] = time.thread_time) -> None:
    """Run on the event loop for as long as the server runs (cancelled with it); block: what blocks its thread,
    cpu_clock: its thread's CPU seconds."""
    while True:
        began, cpu = time.monotonic(), cpu_clock()
        await asyncio.sleep(PACE_S)
        if not model_calls_running():
            continue
        pause = block_for(cpu_clock() - cpu, time.monotonic() - began)
        if pause > 0:
            block(pause)  # on purpose: the loop's thread blocked, the interpreter's lock free for the model
