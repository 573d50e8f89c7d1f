"""The model side of a browser session, apart from what the page shows: a typed, picklable state (LabState: the
live Session with its KV cache, drafters, planner and sampler, the greedy reference, the ar baselines) and the
actions that run the model on it (`step_sessions`). The page side (lab.lab.Lab: replay, timeline, messages)
never runs the model: it sends a ModelCall with the states it holds through one function
(lab.model_calls.run_model), which may run in this process or, on ZeroGPU, in a forked worker that gets the states
pickled (runtime.state_pickle: the shared models, datastore and warm tables by key) and sends them back the same
way. Either way a call gives the same result: everything a step depends on is in the state or in the shared
read-only resources."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from specviz.accept.sampling import SamplingSettings
from specviz.engine.checked_run import CheckedRun
from specviz.engine.paired_baseline import LEAD_MS, PairedBaseline
from specviz.engine.run import RunResult, run_method
from specviz.engine.session import Session
from specviz.engine.token_diff import TokenDiff, token_diff
from specviz.errors import SpecvizError, quoted
from specviz.tree.budget import Budget
from specviz.runtime import state_pickle
from specviz.runtime.modes import parse_mode, settled_here
from specviz.runtime.prompts import PromptText, encode, validate_messages
from specviz.runtime.shared_resources import shared_model
from specviz.runtime.draft_model_spec import shared_draft
from specviz.studies.suite import long_context_prompt


@dataclass(frozen=True)
class Settings:
    model: str
    prompt: str
    run: CheckedRun         # the method, its parameters, the budget and the sampling, checked once by the door
    draft_model: str = ""   # a method's draft model; "" = the target's own weights
    mode: str = ""          # run mode (runtime.modes): "" = the device default (fp32 on CPU)
    max_prompt_tokens: int | None = None  # public mode's cap, checked where the prompt is tokenized (None: context)
    # the prompt as the model reads it (text, or a chat's messages), parsed once by the door (lab.visitor_request)
    model_prompt: str | list[dict] = field(default="", compare=False)

    @property
    def method(self) -> str:
        return self.run.method

    @property
    def budget(self) -> Budget:
        return self.run.budget

    @property
    def params(self) -> tuple:
        """Sorted (name, value) pairs of the method's own parameters."""
        return self.run.params

    @property
    def sampling(self) -> SamplingSettings:
        return self.run.sampling


@dataclass
class LabState:
    """Everything of one session that a step reads or changes, on the CPU between calls."""
    session: Session | None = None
    settings: Settings | None = None
    baselines: dict = field(default_factory=dict)  # (model, mode, prompt ids, n tokens, sampling) -> ar's RunResult
    reference: Session | None = None   # plain greedy on the same prompt, grown as far as the diff needs
    diff: TokenDiff | None = None      # the output against greedy decoding where the method may differ
    paired: PairedBaseline | None = None  # ar on the same prompt, stepped between the run's steps (same load)

    def sessions(self) -> list[Session]:
        """The sessions it holds that run the model: the run, its paired `ar`, the greedy reference."""
        held = (self.session, self.paired.ar if self.paired is not None else None, self.reference)
        return [session for session in held if session is not None]

    def baseline_key(self, new_tokens: int) -> tuple:
        return (self.settings.model, self.settings.mode, tuple(self.session.prompt_ids), new_tokens,
                self.session.sampling)


@dataclass(frozen=True)
class SweepRequest:
    """A sweep's grid, checked by the caller (lab.sweep.Sweep: studies.sweep_grid.parse_axes, the public limits)."""
    model: str
    mode: str
    draft_model: str
    method: str
    prompts: tuple            # studies.suite.SuiteItem per prompt
    axes: tuple               # parse_axes's output: (name, (value text, ...)) per axis
    max_new_tokens: int
    params: tuple             # sorted (name, value) pairs of the method's own parameters
    budget: Budget
    sampling: SamplingSettings
    max_prompt_tokens: int | None = None  # public mode's cap on each prompt (None: the context's)


@dataclass(frozen=True)
class StaticTreeRequest:
    """A static-tree study (studies.static_study), checked by the caller (the public limits)."""
    model: str
    mode: str
    drafter: str              # a draft model spec (runtime.draft_model_spec.resolve_draft): "" = the default
    prompts: tuple            # studies.suite.SuiteItem per prompt
    depth: int
    max_rank: int
    max_new_tokens: int
    max_prompt_tokens: int | None = None  # public mode's cap on each prompt (None: the context's)


class CallAction(Enum):
    """What a ModelCall does (its value names it in the call-cost report, tests/zerogpu_call_cost.py)."""
    STEP = "step"                    # one step on each state
    RUN = "run"                      # steps until the token limit or the end, reporting every every_s
    WARM = "warm"                    # start the session and take one step
    SWEEP = "sweep"                  # a sweep's grid (ModelCall.sweep), on no state
    STATIC_TREE = "static-tree"      # a static-tree study (ModelCall.static_tree), on no state

    @property
    def reports(self) -> bool:
        """Whether the call runs a study that reports progress and a report (no session state)."""
        return self in (CallAction.SWEEP, CallAction.STATIC_TREE)


@dataclass(frozen=True)
class ModelCall:
    """One action that runs the model, on one state per entry of settings (a Lab: one; A/B: two; a sweep: none)."""
    action: CallAction
    settings: tuple[Settings, ...]
    max_new_tokens: int = 1
    every_s: float = 0.25            # a run reports back at most this often
    sweep: SweepRequest | None = None
    static_tree: StaticTreeRequest | None = None


@dataclass
class ModelReply:
    """What a call sends back: the states as they are now, a message per state, or an error (the states as they
    were: the caller keeps its own)."""
    states: "CarriedStates | None"
    messages: tuple[str, ...] = ()
    error: str | None = None
    result: object = None    # a sweep's events (studies.sweep_grid: SweepProgress, then SweepReport), or a
                             # static-tree study's (studies.static_study: StudyProgress, then StaticTreeStudy)


class CarriedStates:
    """LabStates as a call's argument or result. In this process the objects pass as they are; pickled (a
    ZeroGPU worker), they travel as runtime.state_pickle bytes, read back on first use, tensors on `device`.
    A state that cannot be read (written by another version) raises SpecvizError when used, not when
    unpickled, so that the call can answer with a message."""

    def __init__(self, states: list[LabState], device: str = "cpu"):
        self._states, self._blob, self.device = states, None, device

    def __reduce__(self):
        return (CarriedStates._from_blob, (state_pickle.dumps(self.states), self.device))

    @classmethod
    def _from_blob(cls, blob: bytes, device: str) -> "CarriedStates":
        carried = cls.__new__(cls)
        carried._states, carried._blob, carried.device = None, blob, device
        return carried

    @property
    def states(self) -> list[LabState]:
        if self._states is None:
            try:
                self._states = state_pickle.loads(self._blob, self.device)
            except state_pickle.StateFormatError as error:
                raise SpecvizError(f"This session's state could not be read back ({error}): the app was probably "
                                   "updated between two of your actions. Press Reset to start again.") from None
            self._blob = None
        return self._states


def parse_prompt(text: str):
    """Plain text is one user message; a JSON object {"messages": [...]} is a whole chat, and
    {"document": ..., "question": ...} a long-context prompt (the question becomes its last paragraph)."""
    stripped = (text or "").strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            return text  # not JSON after all: the model reads it as text
        except RecursionError:  # nesting deeper than the parser goes: no chat nests like that
            raise SpecvizError("The prompt's JSON nests far too deep: a chat is {\"messages\": [{\"role\": ..., "
                               "\"content\": ...}, ...]}.") from None
        if isinstance(data, dict) and "messages" in data:
            return validate_messages(data["messages"])
        if isinstance(data, dict) and {"document", "question"} <= data.keys():
            if not all(isinstance(data[k], str) and data[k].strip() for k in ("document", "question")):
                raise SpecvizError("A long-context prompt needs a non-empty \"document\" and \"question\" text.")
            return long_context_prompt(data["document"], data["question"])
    if not stripped:
        raise SpecvizError("The prompt is empty: write something (or pick an example) first.")
    return text


# ---- the actions --------------------------------------------------------------------------------
def start_session(state: LabState, settings: Settings) -> str:
    """Make the state's session match settings (a fresh generation when any setting changed); the message."""
    if settings == state.settings and state.session is not None:
        return ""
    parsed = settings.model_prompt
    lm = shared_model(settings.model, settings.mode)
    draft = shared_draft(lm, settings.draft_model, settings.mode)
    prompt_ids = encode(lm.tokenizer, parsed, lm.max_context)
    if settings.max_prompt_tokens is not None and len(prompt_ids) > settings.max_prompt_tokens:
        raise SpecvizError(f"The prompt is {len(prompt_ids):,} tokens long; this Space reads prompts of at most "
                           f"{settings.max_prompt_tokens:,} tokens.")
    session = Session(lm, settings.run, draft=draft).start_ids(prompt_ids, PromptText.of(parsed))
    restarted = state.session is not None and state.session.records
    state.session, state.settings, state.diff = session, settings, None
    message = "Settings changed: generation restarted." if restarted else ""
    # a mode name we do not know, a mode this machine cannot run, a branch that is off
    warnings = [*parse_mode(settings.mode).notes, *settled_here(settings.mode)[1], *lm.notes,
                *session.method.warnings]
    if warnings:
        message = " ".join([message, *(f"⚠️ {w}" for w in warnings)]).strip()
    return message


def step_once(state: LabState, max_new_tokens: int, paired: bool = True) -> str:
    """One step (paired: and ar on the same prompt kept up with it, for the speedup)."""
    session = state.session
    if session.finished:
        return f"Generation finished ({session.finish_reason}). Press Reset to start again."
    if len(session.output_ids) >= max_new_tokens:
        return f"Reached {max_new_tokens} new tokens: raise the limit to go on."
    session.step(max_new_tokens)
    if paired:
        keep_ar_up(state)
    return ""


def _paired(state: LabState) -> PairedBaseline | None:
    """The ar run stepped beside the session's run (started where there is none yet; None for ar itself)."""
    session = state.session
    if session is None or session.name == "ar":
        return None
    if state.paired is None or not state.paired.follows(session):
        state.paired = PairedBaseline(session)
    return state.paired


def keep_ar_up(state: LabState) -> None:
    """After a step of the run: ar on the same prompt and sampling steps until it has as many tokens, so that
    the speedup compares two runs timed under the same load (engine.paired_baseline)."""
    if (paired := _paired(state)) is not None:
        paired.keep_up()


def brunt_after_update(state: LabState) -> str | None:
    """After an update of a paired run: the side that steps first, "ar" or "run" (engine.paired_baseline); None where
    no ar steps beside it (ar itself)."""
    paired = _paired(state)
    if paired is None:
        return None
    return "ar" if paired.brunt_to_ar() else "run"


def lead_ar(state: LabState, max_new_tokens: int) -> None:
    """Before the run's next step: ar steps first for a while (the steps after an update take the brunt of the
    browser drawing it; engine.paired_baseline)."""
    if (paired := _paired(state)) is not None:
        paired.lead(max_new_tokens)


def baseline_so_far(state: LabState) -> RunResult | None:
    """ar's run on the same prompt and sampling for as many tokens as the run has, where one was measured:
    stepped between the run's steps, or alone (measure_baseline); an ar session is its own baseline."""
    session = state.session
    if session is None or not session.output_ids:
        return None
    if session.name == "ar":
        return RunResult.of_session(session)
    n = len(session.output_ids)
    if state.paired is not None and state.paired.follows(session) and state.paired.covers(n):
        return state.paired.result()
    return state.baselines.get(state.baseline_key(n))


def can_step(state: LabState, max_new_tokens: int) -> bool:
    return not state.session.finished and len(state.session.output_ids) < max_new_tokens


def measure_baseline(state: LabState) -> RunResult | None:
    """baseline_so_far, or plain `ar` on the same prompt for the same number of tokens, at the same temperature,
    top-p and seed, measured now (once per prompt, length and sampling settings) where there is none."""
    session = state.session
    if session is None or not session.output_ids:
        return None
    found = baseline_so_far(state)
    if found is not None:
        return found
    n = len(session.output_ids)
    key = state.baseline_key(n)
    state.baselines[key] = run_method(session.lm, "ar", prompt_ids=session.prompt_ids, sampling=session.sampling,
                                      max_new_tokens=n)
    return state.baselines[key]


def update_diff(state: LabState) -> None:
    """The output against plain greedy decoding of the same prompt, when this method may differ from it (the
    method declares itself lossy for its parameters at this temperature); None otherwise. The greedy reference
    is generated as far as the output goes and kept."""
    session = state.session
    if session is None or not session.output_ids or session.lossless or session.temperature > 0:
        state.diff = None
        return
    n = len(session.output_ids)
    if state.paired is not None and state.paired.follows(session) and state.paired.covers(n):
        state.diff = token_diff(state.paired.ar.output_ids[:n], session.output_ids)  # the greedy ar beside it
        return
    if state.reference is None or state.reference.prompt_ids != session.prompt_ids \
            or state.reference.lm is not session.lm:
        state.reference = Session(session.lm, "ar").start_ids(session.prompt_ids)
    state.reference.run(len(session.output_ids))
    state.diff = token_diff(state.reference.output_ids, session.output_ids)


def _update_diff_and_cost_curve(state: LabState) -> None:
    """What the page reads after a call, computed while the model is at hand: the diff against greedy decoding,
    and (budget auto) the verify cost curve loaded for the accounting tab."""
    update_diff(state)
    if state.session is not None and state.session.budget.auto:
        state.session.cost_model  # noqa: B018 (loaded once per process: the accounting tab's curve)


def step_sessions(call: ModelCall, states: list[LabState]):
    """Generator: the call's action on the states, yielding one message per state whenever there is something
    to show (a step: once; a run: at most every call.every_s, and at the end). Bad input raises SpecvizError
    with every state as it was."""
    if len(call.settings) != len(states):
        raise ValueError("a ModelCall names one settings per state")
    messages = ["" for _ in states]
    for i, (state, settings) in enumerate(zip(states, call.settings)):
        try:
            messages[i] = start_session(state, settings)
        except SpecvizError as error:
            raise SpecvizError(f"Side {'AB'[i]}: {error}" if len(states) > 1 else str(error)) from None
    if call.action in (CallAction.STEP, CallAction.WARM):
        for i, state in enumerate(states):
            messages[i] = step_once(state, call.max_new_tokens, paired=len(states) == 1)
            _update_diff_and_cost_curve(state)
        yield tuple(messages)
        return
    if call.action is not CallAction.RUN:
        raise ValueError(f"{call.action} is no action on session states")
    last = time.perf_counter()
    paired = len(states) == 1  # a Lab's run (A/B sides compare with each other, not with ar)
    brunt: str | None = None     # after an update in a paired run: "ar" or "run", the side that steps first
    while any(can_step(state, call.max_new_tokens) for state in states):
        for state in states:
            if can_step(state, call.max_new_tokens):
                if brunt == "ar":
                    lead_ar(state, call.max_new_tokens)
                led = time.perf_counter()
                state.session.step(call.max_new_tokens)
                while brunt == "run" and can_step(state, call.max_new_tokens) \
                        and (time.perf_counter() - led) * 1000 < LEAD_MS:
                    state.session.step(call.max_new_tokens)  # the run's steps take the brunt before ar catches up
                if paired:
                    keep_ar_up(state)
        brunt = None
        if time.perf_counter() - last >= call.every_s:
            for state in states:
                _update_diff_and_cost_curve(state)
            yield tuple(messages)
            if paired:
                brunt = brunt_after_update(states[0])
            last = time.perf_counter()
    for i, state in enumerate(states):
        messages[i] = f"Done ({state.session.finish_reason or 'token limit'})."
        state.session.report_finish()
        measure_baseline(state)
        _update_diff_and_cost_curve(state)
    yield tuple(messages)


def _with_progress(work: Callable[[Callable], object]):
    """Generator: work(progress) run in a thread, its progress(done, total, label) calls as StudyProgress events
    as they come, then its result; its error is raised here."""
    import queue
    import threading

    from specviz.studies.static_study import StudyProgress

    updates: queue.Queue = queue.Queue()
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = work(lambda *done: updates.put(done))
        except BaseException as error:  # noqa: BLE001 (handed to the caller's thread)
            outcome["error"] = error
        updates.put(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    while (update := updates.get()) is not None:
        yield StudyProgress(*update)
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    yield outcome["result"]


def check_prompt_tokens(lm, items, limit: int | None) -> None:
    """Refuse a sweep's or a study's prompt longer than the policy's token limit (as start_session does a Step's)."""
    if limit is None:
        return
    for item in items:
        length = len(encode(lm.tokenizer, item.messages, lm.max_context))
        if length > limit:
            raise SpecvizError(f"The prompt {quoted(item.id)} is {length:,} tokens long; this Space reads prompts of "
                               f"at most {limit:,} tokens.")


def perform_sweep(request: SweepRequest):
    """Generator: a sweep's events, a SweepProgress after each timed run, then the SweepReport
    (studies.sweep_grid.run_grid)."""
    from specviz.studies.sweep_grid import run_grid

    lm = shared_model(request.model, request.mode)
    check_prompt_tokens(lm, request.prompts, request.max_prompt_tokens)
    draft = shared_draft(lm, request.draft_model, request.mode)
    yield from run_grid(lm, list(request.prompts), request.method, list(request.axes), request.max_new_tokens,
                        dict(request.params), request.budget, draft, request.sampling)


def perform_static_tree(request: StaticTreeRequest):
    """Generator: a static-tree study's StudyProgress events, then its StaticTreeStudy. A drafter that cannot
    draft (a MissingHead) is refused with its reason."""
    from specviz.studies.static_study import study_static_trees
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.eagle_head import drafts_from_features

    lm = shared_model(request.model, request.mode)
    check_prompt_tokens(lm, request.prompts, request.max_prompt_tokens)
    drafter = shared_draft(lm, request.drafter, request.mode) or lm
    if isinstance(drafter, MissingHead):
        raise SpecvizError(f"The drafter {quoted(request.drafter)} cannot draft: {drafter.reason}")
    # blank is the head when the target has one, else the target itself (runtime.draft_model_spec.resolve_draft)
    label = request.drafter or ("head" if drafts_from_features(drafter) else "self")
    yield from _with_progress(lambda progress: study_static_trees(
        lm, drafter, label, list(request.prompts), request.depth, request.max_rank, request.max_new_tokens, progress))
