"""Where a long computation may stop: between the chunks of a prefill. A model call's loop (lab.model_calls)
installs its budget's check for the computation of one reply; a prefill of a long prompt is one reply, and a
check only between replies let one visitor's 6,000-token prompt hold the model for minutes while others waited
(docs/hostile-round-three.md, the soak). Nothing installed, a checkpoint does nothing. The check is the
thread's own: the compute thread runs one call's reply at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_installed = threading.local()


@contextmanager
def stopping_with(check: Callable[[], None]) -> Iterator[None]:
    """Within: every checkpoint() on this thread calls check(), which raises to stop the computation."""
    outer = getattr(_installed, "check", None)
    _installed.check = check
    try:
        yield
    finally:
        _installed.check = outer


def checkpoint() -> None:
    """A place where the computation may stop: the installed check raises (SpecvizError) when it must."""
    check = getattr(_installed, "check", None)
    if check is not None:
        check()
