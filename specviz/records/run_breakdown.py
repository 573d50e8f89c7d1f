"""Where a Run's time went: each of the two runs the counters compare (the method and the ar run stepped beside it),
split into what its tokens/s counts (its drafters' set-up, the prefill forward, each step's draft, verify forward,
acceptance and update), and what the Run's call spent besides, which neither counts (the page's frames drawn and
sent, the bookkeeping between steps)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from specviz.records.step import StepRecord


@dataclass(frozen=True)
class RunTimes:
    """One run's own time in ms, as its counters count it (counted_ms is its wall_s) and apart."""
    method: str
    tokens: int
    steps: int
    setup_ms: float          # the method's drafters built and reading the prompt (its indexes)
    prefill_ms: float        # the prefill forward
    draft_ms: float          # the steps' drafting (the planner's cut included)
    forward_ms: float        # the steps' verify forwards
    accept_ms: float         # the steps' acceptance rule (verify less its forward)
    update_ms: float         # caches, drafters, planner and the step's record
    first_step_ms: float     # the first step's whole time (a drafter's first call lands there)
    median_step_ms: float    # a typical step's
    prefill_from: str | None = None  # the run whose prefill forward it shares (ar paired with it): that one's time

    @classmethod
    def of(cls, method: str, tokens: int, prefill_s: float, setup_s: float, records: list[StepRecord],
           prefill_from: str | None = None) -> "RunTimes":
        steps = [r.timings_ms for r in records]
        return cls(method=method, tokens=tokens, steps=len(steps), setup_ms=round(setup_s * 1000, 2),
                   prefill_from=prefill_from,
                   prefill_ms=round((prefill_s - setup_s) * 1000, 2),
                   draft_ms=round(sum(t.draft for t in steps), 2), forward_ms=round(sum(t.forward for t in steps), 2),
                   accept_ms=round(sum(t.verify - t.forward for t in steps), 2),
                   update_ms=round(sum(t.update for t in steps), 2),
                   first_step_ms=round(steps[0].total, 2) if steps else 0.0,
                   median_step_ms=round(statistics.median(t.total for t in steps), 2) if steps else 0.0)

    @property
    def steps_ms(self) -> float:
        return self.draft_ms + self.forward_ms + self.accept_ms + self.update_ms

    @property
    def counted_ms(self) -> float:
        """What the counters divide the tokens by (wall_s)."""
        return self.setup_ms + self.prefill_ms + self.steps_ms

    @property
    def first_step_extra_ms(self) -> float:
        """How much dearer the first step was than a typical one (one-time costs that landed in the run)."""
        return max(0.0, self.first_step_ms - self.median_step_ms)


@dataclass(frozen=True)
class CallTimes:
    """What one Run's call spent on the server, in ms: its compute (both runs' steps and the bookkeeping between
    them) and the page's frames (drawn here, then serialised and sent by Gradio)."""
    frames: int              # replies the page received
    compute_ms: float        # on the compute thread: the runs' steps, the ar run's, diffs and curves between them
    drawing_ms: float        # the page's views of each frame, drawn on the server
    sending_ms: float        # from a frame handed to Gradio until the next steps began
    quiet_wait_ms: float = 0.0  # before computing: waiting for other processes on these cores (a browser) to go quiet


@dataclass(frozen=True)
class RunBreakdown:
    run: RunTimes
    ar: RunTimes | None          # the ar run the speedup is taken against (None: not measured yet, or ar itself)
    call: CallTimes | None       # None: no Run call timed (Steps, a replay)

    @property
    def bookkeeping_ms(self) -> float | None:
        """The call's compute outside both runs' own time (diff against greedy, the accounting's curve, the
        baseline's result): counted by neither."""
        if self.call is None:
            return None
        ar = self.ar.counted_ms if self.ar is not None else 0.0
        return max(0.0, self.call.compute_ms - self.run.counted_ms - ar)
