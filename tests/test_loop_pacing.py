"""Issue 73: the event loop paced while a model call runs (panels.loop_pacing). A loop busy with requests blocks
after each of its turns, long enough that its share of the interpreter stays within LOOP_SHARE; an idle loop, or
any loop while no model call runs, is never blocked. The loop's CPU time is what it measures: a busy machine makes
it smaller, so the tests give it a clock: the wall's for a loop that is all work, one that stands still for a loop
with none (nothing here depends on the machine being idle)."""

import asyncio
import time

from specviz.panels.loop_pacing import LONGEST_BLOCK_S, LOOP_SHARE, block_for, pace_loop


def test_the_block_brings_the_loops_share_back_within_bounds():
    used = 1.5 * LOOP_SHARE * 0.02  # over its share in 20 ms
    pause = block_for(used, 0.02)
    assert pause > 0 and abs(used / (0.02 + pause) - LOOP_SHARE) < 1e-9
    assert block_for(0.002, 0.02) == 0.0            # a loop mostly idle is not blocked
    assert block_for(10.0, 0.02) == LONGEST_BLOCK_S  # nor for long, however busy


def paced(running: int, busy: bool, seconds: float = 0.5) -> list[float]:
    """The blocks pace_loop asks for over `seconds` of a loop that is all work (busy) or none."""
    blocks = []

    async def requests():
        await asyncio.sleep(seconds)

    async def main():
        clock = time.monotonic if busy else (lambda: 0.0)
        pacer = asyncio.get_running_loop().create_task(pace_loop(lambda: running, blocks.append, clock))
        await requests()
        pacer.cancel()
    asyncio.run(main())
    return blocks


def test_a_busy_loop_is_blocked_only_while_a_model_call_runs():
    assert paced(running=1, busy=True) and all(0 < b <= LONGEST_BLOCK_S for b in paced(running=1, busy=True))
    assert paced(running=0, busy=True) == []
    assert paced(running=1, busy=False) == []
