"""Where a long computation may stop: between the chunks of a prefill, and before a step. A model call's loop
(lab.model_calls) installs its budget's check for the computation of one reply; a prefill of a long prompt is one
reply, and a check only between replies let one visitor's 6,000-token prompt hold the model for minutes while others
waited (docs/hostile-round-three.md, the soak). Before a step rather than after a reply: a call whose last reply is
in (a Step) has nothing left to stop, and its visitor is not told it was stopped. Nothing installed, a checkpoint
does nothing. The check is the thread's own: the compute thread runs one call's reply at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_installed = threading.local()


@contextmanager
def stopping_with(check: Callable[[bool], None] | None) -> Iterator[None]:
    """Within: every checkpoint() on this thread calls check(reading_prompt), which raises to stop the computation
    (None: checkpoints do nothing)."""
    outer = getattr(_installed, "check", None)
    _installed.check = check
    try:
        yield
    finally:
        _installed.check = outer


def checkpoint(reading_prompt: bool = False) -> None:
    """A place where the computation may stop: the installed check raises (SpecvizError) when it must.
    reading_prompt: between a prefill's chunks (nothing of the session started yet), else before a step."""
    check = getattr(_installed, "check", None)
    if check is not None:
        check(reading_prompt)


def held_off():
    """Within: checkpoints on this thread do nothing (work that must finish whole once begun: the paired ar catching
    up with the run's step, so that a stop never leaves the comparison one-sided)."""
    return stopping_with(None)
