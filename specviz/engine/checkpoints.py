"""Where a long computation may stop: between the chunks of a prefill, and before a step. A model call's loop
(lab.model_calls) installs its budget's check for the computation of one reply; a prefill of a long prompt is one
reply, and a check only between replies let one visitor's 6,000-token prompt hold the model for minutes while others
waited (docs/hostile-round-three.md, the soak). Before a step rather than after a reply: a call whose last reply is
in (a Step) has nothing left to stop, and its visitor is not told it was stopped. Nothing installed, a checkpoint
does nothing. The check is the thread's own: the compute thread runs one call's reply at a time. Within a prompt's
chunks after the first the check runs before each of the model's layers too (`between_layers`): a chunk is 2 s of a
6,000-token prompt here, and beside a busy server several times that (the soak: crowd calls held the model 14-60 s
past turns of 2-3 s, checked only between chunks)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_installed = threading.local()


@contextmanager
def stopping_with(check: Callable[[bool], None] | None,
                  lend: Callable[[], float] | None = None) -> Iterator[None]:
    """Within: every checkpoint() on this thread calls check(reading_prompt), which raises to stop the computation
    (None: checkpoints do nothing), and every lend_turn() calls lend (another job's work may run there; the seconds
    it took)."""
    outer = getattr(_installed, "check", None), getattr(_installed, "lend", None)
    _installed.check, _installed.lend = check, lend
    try:
        yield
    finally:
        _installed.check, _installed.lend = outer


def checkpoint(reading_prompt: bool = False) -> None:
    """A place where the computation may stop: the installed check raises (SpecvizError) when it must.
    reading_prompt: between a prefill's chunks (nothing of the session started yet), else before a step."""
    check = getattr(_installed, "check", None)
    if check is not None:
        check(reading_prompt)


def lend_turn() -> float:
    """A place where the computation holds nothing another visitor's work needs (between a prefill's chunks, outside
    any forward): the installed lender may run the work waiting for the compute thread there
    (runtime.compute_thread); the seconds it took, which the computation does not count as its own."""
    lend = getattr(_installed, "lend", None)
    return lend() if lend is not None else 0.0


@contextmanager
def between_layers(model) -> Iterator[None]:
    """Within, while a check is installed on this thread: a checkpoint(reading_prompt=True) before each of the
    model's decoder layers (transformers' `model.model.layers`; none where it has no such list). Only for work
    whose result is dropped when it stops (a prompt's prefill into a cache not yet kept): a stop leaves the chunk's
    forward half done."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if getattr(_installed, "check", None) is None or layers is None:
        yield
        return
    hooks = [layer.register_forward_pre_hook(_check_reading_prompt) for layer in layers]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def _check_reading_prompt(module, args) -> None:
    checkpoint(reading_prompt=True)


def held_off():
    """Within: checkpoints on this thread do nothing (work that must finish whole once begun: the paired ar catching
    up with the run's step, so that a stop never leaves the comparison one-sided)."""
    return stopping_with(None)
