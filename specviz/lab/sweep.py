"""A sweep for a visitor, beside A/B compare: the page's method over one or two axes (studies.sweep_grid) on the
page's prompt or a suite category, checked against the public policy before any model runs, run through the
model-call router (lab.model_calls) with its progress as typed events, and its last report kept for the figure,
the CSV and the table."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specviz.studies.suite import SuiteItem
from specviz.studies.sweep_grid import (SweepProgress, SweepReport, format_grid, grid_csv, last_report, parse_axes,
                                       runs_needed)
from specviz.errors import SpecvizError, quoted
from specviz.lab.fair_share import UNLIMITED, CallBudget
from specviz.lab.input_values import MAX_TOKENS_PRIVATE, text_value, whole_number
from specviz.lab.lab_state import CallAction, ModelCall, Settings, SweepRequest
from specviz.lab.prompt_scope import PAGE_PROMPT, scoped_prompts
from specviz.lab.public_policy import Policy
from specviz.lab.visitor_request import VisitorRequest

SCOPES = (PAGE_PROMPT, "suite category")
MAX_AXIS_CHARS = 500   # an axis's text (NAME=V1,V2,...): far more than 64 grid points need


def _number_or_text(value: str):
    """An axis value as the policy compares it ("1" and "1.0" are 1; a word stays a word)."""
    try:
        return float(value)
    except ValueError:
        return value


@dataclass
class Sweep:
    """One visitor's sweeps: what they may run (the policy; the suite whose categories they may pick) and the
    last report."""
    policy: Policy = field(default_factory=Policy.private)
    suite: tuple[SuiteItem, ...] = ()
    report: SweepReport | None = None

    @property
    def categories(self) -> list[str]:
        """The suite's categories, sorted (the page's dropdown)."""
        return sorted({item.category for item in self.suite})

    @property
    def max_tokens(self) -> int:
        """New tokens per run at most: the policy's sweep limit, else the private limit."""
        return self.policy.max_sweep_tokens or MAX_TOKENS_PRIVATE

    # ---- checking ----------------------------------------------------------------------------------------
    def prompts(self, scope, category, settings: Settings) -> list[SuiteItem]:
        """The prompts a scope names: the page's prompt (as the door parsed it), or a suite category's items."""
        if scope == "suite category":
            items = [item for item in self.suite if isinstance(category, str) and item.category == category]
            if not items:
                raise SpecvizError(f"No suite prompts in category {quoted(category)}; the categories: "
                                   f"{', '.join(self.categories)}.")
            return scoped_prompts(scope, settings, {scope: items})
        if scope != PAGE_PROMPT:
            raise SpecvizError(f"scope must be 'page prompt' or 'suite category', got {quoted(scope)}.")
        return scoped_prompts(scope, settings, {})

    def plan(self, request: VisitorRequest, scope, category, axes, tokens) -> SweepRequest:
        """The checked request for the model call: request's settings (method, parameters, budget, sampling,
        model, run mode, draft model), the axes' texts ("NAME=V1,V2,...", blank for none), tokens per run, the
        prompts of scope, and every run it makes within the policy's limits. SpecvizError, one sentence, for
        anything refused; nothing has run then."""
        texts = list(axes) if isinstance(axes, (list, tuple)) else [axes]
        parsed = parse_axes([text_value(f"axis {n}", text, MAX_AXIS_CHARS) for n, text in enumerate(texts, 1)])
        tokens = whole_number("new tokens per run", tokens, 1, self.max_tokens)
        chosen = request.settings
        prompts = self.prompts(scope, category, chosen)
        params = dict(chosen.params)
        for name, values in parsed:  # an axis may not turn on what the policy keeps off (datastore_grow)
            for value in values:
                self.policy.check_params(chosen.method, {name: _number_or_text(value)})
        self.policy.check_sweep(runs_needed(chosen.method, parsed, params, chosen.budget, chosen.sampling,
                                            len(prompts)), tokens)
        return SweepRequest(model=chosen.model, mode=chosen.mode, draft_model=chosen.draft_model,
                            method=chosen.method, prompts=tuple(prompts),
                            axes=tuple((name, tuple(values)) for name, values in parsed), max_new_tokens=tokens,
                            params=tuple(sorted(params.items())), budget=chosen.budget, sampling=chosen.sampling,
                            max_prompt_tokens=chosen.max_prompt_tokens)

    # ---- running -----------------------------------------------------------------------------------------
    def run(self, request: VisitorRequest, scope, category, axes, tokens,
            progress: Callable[[SweepProgress], None] | None = None, budget: CallBudget = UNLIMITED) -> SweepReport:
        """plan, then run_planned."""
        return self.run_planned(self.plan(request, scope, category, axes, tokens), progress, budget)

    @staticmethod
    def call_of(planned: SweepRequest) -> ModelCall:
        return ModelCall(CallAction.SWEEP, (), planned.max_new_tokens, sweep=planned)

    def run_planned(self, planned: SweepRequest, progress: Callable[[SweepProgress], None] | None = None,
                    budget: CallBudget = UNLIMITED) -> SweepReport:
        """One model call (lab.model_calls): progress(event) after each timed run; the report, kept."""
        from specviz.lab import model_calls

        results = (result for _, _, result in model_calls.call(self.call_of(planned), [], budget))
        self.report = last_report(results, progress)
        return self.report

    # ---- showing -----------------------------------------------------------------------------------------
    def _finished(self) -> SweepReport:
        if self.report is None:
            raise SpecvizError("No sweep yet: run one first.")
        return self.report

    @property
    def message(self) -> str:
        report = self._finished()
        return f"Sweep done: {len(report.points)} points x {report.prompts} prompts."

    def figure(self, metric: str = "speedup"):
        """The last report's plot of metric (studies.sweep_grid.METRICS)."""
        from specviz.render.sweep_figures import grid_figure

        return grid_figure(self._finished(), metric)

    def table_markdown(self) -> str:
        return f"```\n{format_grid(self._finished())}\n```"

    def write_csv(self, folder: Path) -> Path:
        """The last report's CSV (one line per grid point) written in folder; its path."""
        report = self._finished()
        path = Path(folder) / f"specviz-sweep-{report.method}.csv"
        path.write_text(grid_csv(report))
        return path
