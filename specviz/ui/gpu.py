"""The one function that runs the model for the app: every Step, Run, A/B step or run, sweep and the start-up
step is a call of `run_model` (through `call`), with plain picklable arguments and results that carry the
sessions' states (ui.lab_state). On ZeroGPU it is decorated with `spaces.GPU`: each call may then run in a forked
worker with its arguments pickled in and its results pickled back, and a step gives the same result there as in
this process. Elsewhere `spaces.GPU` returns it unchanged (and without `spaces` installed it is called as it is).

The duration a call asks ZeroGPU for follows from what it does: a Run, from its token limit. A Run longer than the
longest call ZeroGPU grants is refused before it starts."""

from __future__ import annotations

import os
from typing import Callable, Iterator

from specviz.errors import SpecvizError
from specviz.ui.lab_state import CarriedStates, LabState, ModelCall, ModelReply, perform, perform_sweep

try:  # ZeroGPU: `spaces` before torch touches CUDA (app.py imports it first of all; here for other entry points)
    import spaces
except ImportError:  # not on a Space: the function runs as it is
    spaces = None

# GPU time a call asks for: 0.06 s a generated token is three times the 20 ms per token `ar` took on a T4
# (docs/benchmarks.md, GPU checks); a Run's tokens count twice (the ar baseline measured when it ends).
CALL_BASE_S = 15
SECONDS_PER_TOKEN = 0.06
MAX_CALL_S = 120  # the longest call this app asks ZeroGPU for


def zero_gpu() -> bool:
    """Whether calls go to ZeroGPU workers (spaces installed and the Space's hardware is ZeroGPU)."""
    return spaces is not None and os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def _tokens(call: ModelCall) -> int:
    """Tokens a call generates at most: a Run's (and its baseline's) on each state, a sweep's runs (its points
    and the ar references on each prompt), one step's."""
    if call.action == "sweep":
        points = 1
        for _, values in call.sweep.axes:
            points *= len(values)
        return (points + 2) * len(call.sweep.prompts) * call.sweep.max_new_tokens
    per_state = 2 * call.max_new_tokens if call.action == "run" else 1
    return per_state * max(1, len(call.settings))


def call_seconds(call: ModelCall, carried: CarriedStates | None = None) -> int:
    """The GPU time a call asks for (spaces.GPU's duration, given the call's own arguments)."""
    return int(CALL_BASE_S + SECONDS_PER_TOKEN * _tokens(call))


def check_duration(call: ModelCall) -> None:
    """Refuse a call longer than MAX_CALL_S, saying how much fits."""
    seconds = call_seconds(call)
    if seconds <= MAX_CALL_S:
        return
    fits = int((MAX_CALL_S - CALL_BASE_S) / SECONDS_PER_TOKEN)
    if call.action == "sweep":
        raise SpecvizError(f"This sweep generates up to {_tokens(call)} tokens, about {seconds} s of GPU time, and a "
                           f"call may take at most {MAX_CALL_S} s here: fewer points or tokens (at most {fits} "
                           "tokens in all, the ar references included).")
    per_token = _tokens(call) // max(1, call.max_new_tokens)
    raise SpecvizError(f"A Run of {call.max_new_tokens} new tokens needs about {seconds} s of GPU time and a call "
                       f"may take at most {MAX_CALL_S} s here: ask for at most {fits // per_token} tokens (Run again "
                       "to go on from where it stopped).")


def run_model(call: ModelCall, carried: CarriedStates) -> Iterator[ModelReply]:
    """THE function that runs the model. Generator: the call's replies, each with the states as they are then
    (on the CPU once pickled); bad input ends it with one reply that carries the message and no states."""
    try:
        if call.action == "sweep":
            for result in perform_sweep(call.sweep):
                yield ModelReply(None, result=result)
            return
        states = carried.states
        for messages in perform(call, states):
            yield ModelReply(CarriedStates(states, "cpu"), messages)
    except SpecvizError as error:
        yield ModelReply(None, error=str(error))


def _decorated(fn: Callable) -> Callable:
    if spaces is None:
        return fn
    return spaces.GPU(duration=call_seconds)(fn)


_entry: list[Callable] = [_decorated(run_model)]


def use(entry: Callable | None) -> None:
    """Run calls through entry (a stand-in for spaces.GPU's wrapper, in tests); None: the default."""
    _entry[0] = entry if entry is not None else _decorated(run_model)


def models_device() -> str:
    """Where the shared models run (ZeroGPU: cuda, which spaces lends inside a call)."""
    import torch

    return "cuda" if zero_gpu() or torch.cuda.is_available() else "cpu"


def call(call_: ModelCall, states: list[LabState]) -> Iterator[tuple[list[LabState], tuple[str, ...], object]]:
    """Run one call: (the states as they are now, a message per state, a sweep's result) for each reply;
    SpecvizError for bad input, with the caller's states untouched where the call ran in another process."""
    if _entry[0] is not run_model:  # routed to GPU workers (ZeroGPU, or its stand-in in the tests)
        check_duration(call_)
    for reply in _entry[0](call_, CarriedStates(states, models_device())):
        if reply.error is not None:
            raise SpecvizError(reply.error)
        yield (reply.states.states if reply.states is not None else []), reply.messages, reply.result
