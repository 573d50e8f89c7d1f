"""The one function that runs the model for the app: every Step, Run, A/B step or run, sweep and the start-up
step is a call of `run_model` (through `call`), with plain picklable arguments and results that carry the
sessions' states (lab.lab_state). On ZeroGPU it is decorated with `spaces.GPU`: each call may then run in a forked
worker with its arguments pickled in and its results pickled back, and a step gives the same result there as in
this process. Elsewhere `spaces.GPU` returns it unchanged (and without `spaces` installed it is called as it is).

The duration a call asks ZeroGPU for follows from what it does: a Step, one step; a Run, its token limit. A Run
longer than the longest call ZeroGPU grants is refused before it starts. A call ZeroGPU refuses (quota spent, queue
timed out, duration over its limit) becomes a message that says what still works without the GPU, the session as it
was. On a ZeroGPU Space a model placed on its CPUs (runtime.placement: the default model, by default) never goes
through spaces.GPU."""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Callable, Iterator

from specviz.studies.static_study import StaticTreeStudy, StudyProgress, last_study
from specviz.errors import SpecvizError
from specviz.engine.checkpoints import stopping_with
from specviz.runtime.compute_thread import COMPUTE
from specviz.runtime.placement import on_space, on_zero_gpu, placed_on_cpu
from specviz.lab.fair_share import UNLIMITED, CallBudget
from specviz.lab.call_activity import ACTIVITY
from specviz.lab.fork_guard import GUARD
from specviz.lab.lab_state import (CallAction, CarriedStates, LabState, ModelCall, ModelReply, perform_static_tree,
                                  perform_sweep, step_sessions)

try:  # ZeroGPU: `spaces` before torch touches CUDA (app.py imports it first of all; here for other entry points)
    import spaces
except ImportError:  # not on a Space: the function runs as it is
    spaces = None

# GPU time a call declares (ZeroGPU admits a call against it, and shorter ones queue sooner): a fixed part (a
# worker's start and the state pickled both ways), a part per generated token (a Run's count twice: the ar baseline
# measured when it ends), and one prefill of each carried session's context, 2 FLOPs per parameter and token at
# REBUILD_FLOPS. The figures behind each constant: docs/benchmarks.md, "What a ZeroGPU call declares".
CALL_BASE_S = 1.5
SECONDS_PER_TOKEN = 0.05
# fp32 FLOP/s assumed for a prefill on ZeroGPU's card (an assumption, not a measurement: the same section)
REBUILD_FLOPS = 20e12
MAX_CALL_S = 120  # the longest call this app asks ZeroGPU for
# what still works when ZeroGPU refuses a call: nothing of it needs the GPU
WITHOUT_GPU = ("Meanwhile Play, the timeline and the Replay tab's recorded runs work without the GPU, and your run "
               "is as it was: Step or Run again later.")


def zero_gpu() -> bool:
    """Whether calls go to ZeroGPU workers (spaces installed and the Space's hardware is ZeroGPU)."""
    return spaces is not None and on_zero_gpu()


def call_tokens(call: ModelCall) -> int:
    """Tokens a call generates at most: a Run's (and its baseline's) on each state, a sweep's runs (its points
    and the ar references on each prompt), one step's."""
    if call.action is CallAction.STATIC_TREE:  # ar on each prompt, then the drafter along it: about a level a token
        request = call.static_tree
        return 2 * len(request.prompts) * request.max_new_tokens
    if call.action is CallAction.SWEEP:
        points = 1
        for _, values in call.sweep.axes:
            points *= len(values)
        return (points + 2) * len(call.sweep.prompts) * call.sweep.max_new_tokens
    per_state = 2 * call.max_new_tokens if call.action is CallAction.RUN else 1
    return per_state * max(1, len(call.settings))


def rebuild_seconds(carried: CarriedStates | None) -> float:
    """The time a worker spends rebuilding the carried sessions' KV caches from their tokens (runtime.state_pickle)."""
    if carried is None:
        return 0.0
    flops = sum(2 * session.lm.parameter_count * len(session.context)
                for state in carried.states for session in state.sessions())
    return flops / REBUILD_FLOPS


def call_seconds(call: ModelCall, carried: CarriedStates | None = None) -> int:
    """The GPU time a call asks for (spaces.GPU's duration, given the call's own arguments), whole seconds up."""
    return math.ceil(CALL_BASE_S + SECONDS_PER_TOKEN * call_tokens(call) + rebuild_seconds(carried))


def check_duration(call: ModelCall) -> None:
    """Refuse a call longer than MAX_CALL_S, saying how much fits."""
    seconds = call_seconds(call)
    if seconds <= MAX_CALL_S:
        return
    fits = int((MAX_CALL_S - CALL_BASE_S) / SECONDS_PER_TOKEN)
    if call.action is CallAction.STATIC_TREE:
        raise SpecvizError(f"This study runs about {call_tokens(call)} forwards, about {seconds} s of GPU time, and "
                           f"a call may take at most {MAX_CALL_S} s here: fewer prompts or tokens per prompt.")
    if call.action is CallAction.SWEEP:
        raise SpecvizError(f"This sweep generates up to {call_tokens(call)} tokens, about {seconds} s of GPU time, "
                           f"and a call may take at most {MAX_CALL_S} s here: fewer points or tokens (at most {fits} "
                           "tokens in all, the ar references included).")
    per_token = call_tokens(call) // max(1, call.max_new_tokens)
    raise SpecvizError(f"A Run of {call.max_new_tokens} new tokens needs about {seconds} s of GPU time and a call "
                       f"may take at most {MAX_CALL_S} s here: ask for at most {fits // per_token} tokens (Run again "
                       "to go on from where it stopped).")


def run_model(call: ModelCall, carried: CarriedStates) -> Iterator[ModelReply]:
    """THE function that runs the model. Generator: the call's replies, each with the states as they are then
    (on the CPU once pickled); bad input ends it with one reply that carries the message and no states."""
    try:
        if call.action.reports:
            results = (perform_sweep(call.sweep) if call.action is CallAction.SWEEP
                       else perform_static_tree(call.static_tree))
            for result in results:
                yield ModelReply(None, result=result)
            return
        states = carried.states
        for messages in step_sessions(call, states):
            yield ModelReply(CarriedStates(states, "cpu"), messages)
    except SpecvizError as error:
        yield ModelReply(None, error=str(error))


def run_in_gpu_worker(call: ModelCall, carried: CarriedStates) -> Iterator[ModelReply]:
    """What spaces.GPU runs in its forked worker: run_model on one CPU compute thread. The worker is a fork of a
    process whose CPU threads have computed (the start-up, a model on the Space's CPUs): a child's first parallel
    region would wait forever for pool threads it does not have (tests/test_space.py shows it), and on a GPU the CPU
    threads only carry the host side of a step."""
    import torch

    torch.set_num_threads(1)
    yield from run_model(call, carried)


def _default_runner() -> Callable:
    if spaces is None or not zero_gpu():  # elsewhere spaces.GPU changes nothing: the model runs here
        return run_model
    return spaces.GPU(duration=call_seconds)(run_in_gpu_worker)


_runner: list[Callable] = [_default_runner()]   # what `call` hands a call to: run_model, or spaces.GPU's wrapper


def run_calls_with(runner: Callable | None) -> None:
    """Hand calls to runner (a stand-in for spaces.GPU's wrapper, in tests); None: the default."""
    _runner[0] = runner if runner is not None else _default_runner()


def models_device() -> str:
    """Where the shared models run (ZeroGPU: cuda, which spaces lends inside a call)."""
    import torch

    return "cuda" if zero_gpu() or torch.cuda.is_available() else "cpu"


def computes_beside_the_browser() -> bool:
    """Whether calls compute on the CPU cores a visitor's browser may share: this machine's, off a Space (a Space's
    visitors browse from their own machines) and with no GPU doing the work."""
    return not on_space() and models_device() == "cpu"


def call_models(call: ModelCall) -> list[str]:
    """The models a call runs (each state's, a sweep's or a static-tree study's)."""
    if call.sweep is not None:
        return [call.sweep.model]
    if call.static_tree is not None:
        return [call.static_tree.model]
    return [settings.model for settings in call.settings]


def on_cpu(call: ModelCall) -> bool:
    """Whether a call runs on this Space's CPUs rather than through ZeroGPU (runtime.placement); a call over models
    placed on both is refused: one call runs in one place."""
    placed = {placed_on_cpu(model) for model in call_models(call)}
    if len(placed) > 1:
        raise SpecvizError("These two models run in different places on this Space (one on its CPUs, one on the "
                           "GPU): compare configurations of one model, or two models of the same place.")
    return placed == {True}


def refusal(error: BaseException) -> str | None:
    """What to tell the visitor when ZeroGPU did not run a call (quota spent, queue timed out, duration over its
    limit, no GPU free): spaces raises gradio's Error with a title; None for any other error."""
    title = str(getattr(error, "title", "") or "")
    text = str(getattr(error, "message", "") or error).strip()
    if "ZeroGPU" not in title and "ZeroGPU" not in text and "GPU task aborted" not in text:
        return None
    what = title or "ZeroGPU refused the call"
    return f"The GPU did not run this call ({what}): {text.rstrip('.')}. {WITHOUT_GPU}"


def call(call_: ModelCall, states: list[LabState], budget: CallBudget = UNLIMITED
         ) -> Iterator[tuple[list[LabState], tuple[str, ...], object]]:
    """Run one call: (the states as they are now, a message per state, a sweep's result) for each reply;
    SpecvizError for bad input or a call ZeroGPU refused, with the caller's states untouched where the call ran in
    another process. budget (lab.fair_share) is checked before each step and between a prefill's chunks (a call
    in another process: after each reply): past its deadline, or once its visitor left, the call stops with a
    SpecvizError and the replies already taken stand."""
    entry, device = _runner[0], models_device()
    if entry is not run_model and zero_gpu() and on_cpu(call_):
        entry, device = run_model, "cpu"  # this Space's CPUs answer sooner and spend no quota
    if entry is not run_model:  # routed to GPU workers (ZeroGPU, or its stand-in in the tests)
        check_duration(call_)
    here = entry is run_model
    try:
        with ACTIVITY.running():  # background work waits while a visitor's call runs (lab.call_activity)
            yield from _replies(entry(call_, CarriedStates(states, device)), here, budget)
    except SpecvizError:
        raise
    except Exception as error:  # noqa: BLE001 (spaces raises gradio's Error, or RuntimeError from its client)
        message = refusal(error)
        if message is None:
            raise
        raise SpecvizError(message) from None


def _replies(replies, here: bool, budget: CallBudget) -> Iterator[tuple[list[LabState], tuple[str, ...], object]]:
    """The replies of one call as call() yields them, its budget checked after each; closed early (the page left,
    Stop), the call's generator is closed where it computes."""
    try:
        yield from _checked_replies(replies, here, budget)
    finally:
        close = getattr(replies, "close", lambda: None)
        COMPUTE.run(close) if here else close()


def _checked_replies(replies, here: bool, budget: CallBudget
                     ) -> Iterator[tuple[list[LabState], tuple[str, ...], object]]:
    first = True
    while True:
        # no fork while this process computes (lab.fork_guard): CPU work holds the guard shared while it makes
        # each reply, a GPU call holds it alone until its first reply, by when its worker is forked
        with GUARD.computing() if here else GUARD.forking() if first else nullcontext():
            # computed on the process's one compute thread (runtime.compute_thread) when the model runs here
            # the budget is checked inside a reply too, between a long prefill's chunks (engine.checkpoints)
            reply = COMPUTE.run(_next_within, replies, budget) if here else next(replies, None)
        first = False
        if reply is None:
            break
        if reply.error is not None:
            raise SpecvizError(reply.error)
        yield (reply.states.states if reply.states is not None else []), reply.messages, reply.result
        if not here:  # here the checks are the computation's own checkpoints, before each step and prefill chunk
            budget.check()  # past it: SpecvizError, and _replies closes the call (a worker stops at its next reply)


def _next_within(replies, budget: CallBudget):
    """The call's next reply, computed with its budget's check installed at the computation's checkpoints."""
    with stopping_with(budget.check_at, lambda: budget.lend(COMPUTE.lend)):
        return next(replies, None)


def studied(call_: ModelCall, progress: Callable[[StudyProgress], None],
            budget: CallBudget = UNLIMITED) -> StaticTreeStudy:
    """Run a static-tree study's call: progress(event) on each StudyProgress reply; the study. (A sweep's are read
    the same way: lab.sweep.Sweep with studies.sweep_grid.last_report.)"""
    return last_study((result for _, _, result in call(call_, [], budget)), progress)
