"""The run path: one of our methods on one prompt, to a token limit, and the figures of that run (a transformers
peer runs in studies.peers). bench, sweep, the CLI's generate, the app's ar baseline and the tools all run through here,
so a run is set up, timed and counted one way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specviz.accept.sampling import SamplingSettings
from specviz.engine import costmodel
from specviz.engine.checked_run import CheckedRun
from specviz.engine.session import RunFigures, Session
from specviz.errors import SpecvizError
from specviz.methods import get_method
from specviz.tree.budget import AUTO_BUDGET, Budget
from specviz.records.trace import StepRecord, Trace
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.prompts import PromptText, encode

WARMUP_STEPS = 8  # past a measured choice's first tries (two steps of each of its two kinds)


@dataclass
class RunResult:
    """One generation and its figures. A peer's run (transformers generate()) has no step records, no
    margins and no trace: records and margins are None there."""
    method: str
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    steps: int                          # verify steps (a peer: target forwards)
    prefill_s: float                    # a peer's prefill is inside decode_s
    decode_s: float                     # the steps' own time
    finish_reason: str                  # eos, context, length (the token limit) or stopped (should_stop)
    lossless_declared: bool             # what the method promises for its parameters at this temperature
    margins: list[float] | None = None  # per output token: the target's top-2 logit margin where it was chosen
    records: list[StepRecord] | None = None
    trace: Trace | None = None          # only when run_method was asked for it
    setup_s: float = 0.0                # the part of prefill_s the method's drafters took (Session.setup_s)
    prefill_from: str | None = None     # the run whose prompt entries it copied and prefill it was charged

    @classmethod
    def of_session(cls, session: Session, trace: bool = False) -> "RunResult":
        """A snapshot of a session's generation so far."""
        output_ids = list(session.output_ids)
        finish = session.finish_reason or "length"
        return cls(method=session.name, prompt_ids=list(session.prompt_ids), output_ids=output_ids,
                   text=session.text, steps=len(session.records), prefill_s=session.prefill_s,
                   decode_s=session.step_s, finish_reason=finish, lossless_declared=session.lossless,
                   margins=list(session.margins), records=list(session.records),
                   trace=session.trace() if trace else None, setup_s=session.setup_s,
                   prefill_from=session.prefill_from)

    # ---- figures ---------------------------------------------------------------------------------
    @property
    def new_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def wall_s(self) -> float:
        """Prefill and steps: what a user waits for."""
        return self.prefill_s + self.decode_s

    @property
    def mean_accepted(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s else 0.0

    @property
    def drafted(self) -> int:
        """Draft nodes verified, over all steps."""
        return sum(len(r.nodes) - 1 for r in self.records or [])

    @property
    def accepted_drafts(self) -> int:
        return sum(r.num_accepted_drafts for r in self.records or [])

    @property
    def first_step_s(self) -> float:
        return self.records[0].timings_ms.total / 1000 if self.records else 0.0

    @property
    def first_step_tokens(self) -> int:
        return len(self.records[0].accepted_tokens) if self.records else 0

    def figures(self) -> RunFigures:
        """new_tokens, steps, mean_accepted, wall_s, tokens_per_s, rounded as Session.stats gives them."""
        return RunFigures.of(self.new_tokens, self.steps, self.wall_s)


# ---- running ---------------------------------------------------------------------------------------
def run_method(lm: LoadedModel, method: "str | CheckedRun", prompt: str | list[dict] | PromptText | None = None, *,
               prompt_ids: list[int] | None = None, params: dict | None = None,
               budget: Budget | int | str = AUTO_BUDGET, sampling: SamplingSettings = SamplingSettings(),
               max_new_tokens: int, draft: LoadedModel | None = None, cost_model: costmodel.CostModel | None = None,
               should_stop: Callable[[], bool] | None = None, on_step: Callable[[StepRecord], None] | None = None,
               trace: bool = False) -> RunResult:
    """Run `method` (a name, or a CheckedRun with its settings) on a prompt until max_new_tokens output tokens, EOS, the context limit or should_stop().
    prompt: the text or chat (encoded here unless prompt_ids are given; a method that builds its own context
    from it, RAPID, reads it); prompt_ids: the encoded prompt. budget: a Budget, or its text form ("auto", a
    number of nodes). draft: the draft model, for a method that uses one (the others ignore it). trace: also keep
    the run's trace (RunResult.trace)."""
    session = _started_session(lm, method, prompt, prompt_ids=prompt_ids, params=params, budget=budget,
                               sampling=sampling, draft=draft, cost_model=cost_model)
    session.run(max_new_tokens, should_stop, on_step)
    result = RunResult.of_session(session, trace)
    if session.finish_reason is None and result.new_tokens < max_new_tokens:
        result.finish_reason = "stopped"
    return result


def warm_up(lm: LoadedModel, method: "str | CheckedRun", prompt: str | list[dict] | PromptText | None = None, *,
            prompt_ids: list[int] | None = None, params: dict | None = None,
            budget: Budget | int | str = AUTO_BUDGET, sampling: SamplingSettings = SamplingSettings(),
            draft: LoadedModel | None = None) -> None:
    """An untimed short run (WARMUP_STEPS steps), so that first-call costs land on no measured prompt:
    kernels, the datastore, the warm copy-logit table, and the first tries of a measured choice (unified's
    draft model stage, ReSpec's fallback), which the process's later sessions of the same setting share."""
    session = _started_session(lm, method, prompt, prompt_ids=prompt_ids, params=params, budget=budget,
                               sampling=sampling, draft=draft)
    while not session.finished and len(session.records) < WARMUP_STEPS:
        session.step()


def _started_session(lm: LoadedModel, method: "str | CheckedRun", prompt: str | list[dict] | PromptText | None = None, *,
                     prompt_ids: list[int] | None = None, params: dict | None = None,
                     budget: Budget | int | str = AUTO_BUDGET, sampling: SamplingSettings = SamplingSettings(),
                     draft: LoadedModel | None = None, cost_model: costmodel.CostModel | None = None) -> Session:
    """A session of one of our methods, prefilled with the prompt (see run_method). A CheckedRun brings its own
    parameters, budget and sampling (checked where it was made; params, budget and sampling are then unused)."""
    name = method.method if isinstance(method, CheckedRun) else method
    own_draft = draft if get_method(name).uses_draft_model else None
    session = Session(lm, method, params, budget=budget, sampling=sampling, cost_model=cost_model, draft=own_draft)
    return session.start_ids(_prompt_ids(lm, prompt, prompt_ids), _prompt_text(prompt))


def _prompt_text(prompt) -> PromptText | None:
    if prompt is None or isinstance(prompt, PromptText):
        return prompt
    return PromptText.of(prompt)


def _prompt_ids(lm: LoadedModel, prompt, prompt_ids: list[int] | None) -> list[int]:
    if prompt_ids is not None:
        return list(prompt_ids)
    if prompt is None:
        raise SpecvizError("A run needs a prompt: its text or its token ids.")
    messages = list(prompt.messages) if isinstance(prompt, PromptText) else prompt
    return encode(lm.tokenizer, messages, lm.max_context)
