"""The planner's predicted speedup over `ar` beside the measured one, for a step and for a run.

The planner (budget=auto) chooses the tree that maximises (1 + E[accepted]) / (draft + verify cost): its
prediction of a step is that many tokens in that many milliseconds, against `ar`'s one token per one-token
verify. The measurement is the tokens the step committed in the time it took, against `ar`'s measured time
per token. The gap between the two has three factors, reported apart so that it can be explained:
accepted (tokens committed / tokens expected), time (ms taken / ms priced) and ar (ar's measured ms per
token / the one-token verify the planner priced), with measured / predicted = accepted x ar / time.

A step's accepted drafts are a random number even to a planner whose chances are exact, so its predicted E(T) - 1
misses the measured count by that number's own spread: PredictionError sets the mean absolute error beside the
error the planner's own chances expect (their mean absolute deviation) and the bias, so that an error is read as
spread (the chances are uncertain) or as a wrong estimate (the bias, or an error well above the spread)."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.records.status import ACCEPTED_STATUSES
from specviz.records.step import StepRecord


@dataclass(frozen=True)
class SpeedupCheck:
    predicted: float | None     # the planner's expected speedup over ar (None: it priced nothing)
    measured: float | None      # tokens per ms over ar's tokens per ms (None: no ar measured)
    expected_tokens: float      # what the planner expected the steps to commit (priced steps only)
    tokens: int                 # what they committed
    priced_ms: float            # draft + overhead + verify cost the planner priced them at
    taken_ms: float             # what they took (draft, verify, acceptance, update)
    ar_priced_ms: float         # the one-token verify the planner priced ar's token at (mean over steps)
    ar_ms: float | None         # ar's measured ms per token
    steps: int                  # steps priced by the planner (a step of a fixed budget is not)

    @property
    def accepted_factor(self) -> float | None:
        return self.tokens / self.expected_tokens if self.expected_tokens else None

    @property
    def time_factor(self) -> float | None:
        return self.taken_ms / self.priced_ms if self.priced_ms else None

    @property
    def ar_factor(self) -> float | None:
        return self.ar_ms / self.ar_priced_ms if self.ar_ms and self.ar_priced_ms else None


def speedup_check(records: list[StepRecord], ar_ms_per_token: float | None) -> SpeedupCheck:
    """Predicted against measured speedup over the steps the planner priced (budget=auto); ar_ms_per_token:
    ar's measured decode time per token (None: ar not measured)."""
    priced = [r for r in records if r.plan is not None and r.plan.cut is not None and r.plan.verify_ms]
    expected = sum(1 + r.plan.cut.expected_accepted for r in priced)
    priced_ms = sum(r.plan.cut.fixed_ms + r.plan.verify_ms[r.plan.cut.kept] for r in priced)
    ar_priced = sum(r.plan.verify_ms[0] for r in priced) / len(priced) if priced else 0.0
    measured_over = priced or records
    tokens = sum(len(r.accepted_tokens) for r in measured_over)
    taken = sum(r.timings_ms.total for r in measured_over)
    predicted = expected / priced_ms * ar_priced if priced and priced_ms else None
    measured = tokens / taken * ar_ms_per_token if ar_ms_per_token and taken else None
    return SpeedupCheck(predicted, measured, expected, tokens, priced_ms, taken, ar_priced, ar_ms_per_token, len(priced))


def ar_ms_per_token(ar_records: list[StepRecord]) -> float | None:
    """ar's decode milliseconds per token from its step records (prefill excluded, as a step's is)."""
    tokens = sum(len(r.accepted_tokens) for r in ar_records)
    return sum(r.timings_ms.total for r in ar_records) / tokens if tokens else None


def accepted_at_least(record: StepRecord) -> list[float] | None:
    """P(at least d drafts accepted), d = 1.., under the planner's calibrated chances of the verified tree's nodes
    (None: the step was not planned). Verification accepts one path, so the nodes at one depth exclude each other
    and their chances add; the sums are clamped to at most 1 and to never grow with depth (a calibration factor
    above 1 can push siblings' sum past their parent's)."""
    if record.plan is None:
        return None
    by_depth: dict[int, float] = {}
    for node in record.nodes[1:]:
        if node.chance is None:
            return None
        by_depth[node.depth] = by_depth.get(node.depth, 0.0) + node.chance
    out, bound = [], 1.0
    for depth in range(1, max(by_depth, default=0) + 1):
        bound = min(bound, by_depth.get(depth, 0.0))
        out.append(bound)
    return out


def own_spread(at_least: list[float]) -> float:
    """E|X - E[X]| of the accepted drafts X whose tail is at_least (P(X >= d), d = 1..): the mean absolute error a
    planner with exactly these chances expects to make predicting E[X]."""
    mean = sum(at_least)
    tail = [1.0, *at_least, 0.0]
    return sum((tail[k] - tail[k + 1]) * abs(k - mean) for k in range(len(tail) - 1))


@dataclass(frozen=True)
class PredictionError:
    steps: int           # planned steps
    mae: float           # mean |predicted - measured| accepted drafts
    bias: float          # mean predicted - measured (> 0: the planner promised more than it got)
    spread: float        # mean of each step's own_spread: the MAE exact chances would expect
    # the same error of what the planner expected of each step's tree after learning from that step (how much one
    # step teaches it), and of the drafters' own estimates, never learnt (whether the run's learning helps its
    # predictions); None where a record lacks them (a trace recorded before they were kept)
    learnt_mae: float | None = None
    unlearnt_mae: float | None = None

    @classmethod
    def of(cls, records: list[StepRecord]) -> "PredictionError | None":
        """Over the planned steps (None: none was planned)."""
        planned = [r for r in records if r.plan is not None]
        if not planned:
            return None
        n = len(planned)
        measured = [r.num_accepted_drafts for r in planned]

        def error(predicted: list[float | None]) -> float | None:
            if any(p is None for p in predicted):
                return None
            return sum(abs(p - m) for p, m in zip(predicted, measured)) / n

        predicted = [r.plan.predicted_accepted for r in planned]
        tails = [accepted_at_least(r) for r in planned]
        return cls(n, error(predicted), sum(p - m for p, m in zip(predicted, measured)) / n,
                   sum(own_spread(tail) for tail in tails if tail is not None) / n,
                   error([r.plan.learnt_accepted for r in planned]),
                   error([r.plan.unlearnt_accepted for r in planned]))


@dataclass(frozen=True)
class ChanceBand:
    """The planner's calibrated chances of one source set's nodes within one band, against what the target did."""
    sources: str         # the sources that offered the nodes, joined ("retrieval+search")
    low: float           # the band: chances in [low, low + width)
    nodes: int
    mean_chance: float   # the mean calibrated (unconditional) chance the planner gave them
    accepted: float      # the share of them the target accepted


BAND_WIDTH = 0.25  # chance_reliability's bands: four, wide enough to hold tens of nodes of a suite each


def chance_reliability(records: list[StepRecord], width: float = BAND_WIDTH) -> list[ChanceBand]:
    """Per source set and band of the verified nodes' calibrated chances: were the chances right? (A planner whose
    chances are right has accepted = mean_chance in every band; engine.planner calibrates per source, and a node
    several sources offered takes their smallest factor.)"""
    bands: dict[tuple[str, int], tuple[int, float, int]] = {}  # (sources, band) -> (nodes, sum of chances, accepted)
    for record in records:
        for node in record.nodes[1:]:
            if node.chance is None:
                continue
            key = ("+".join(sorted(node.sources)), min(int(node.chance / width), int(round(1 / width)) - 1))
            n, chances, accepted = bands.get(key, (0, 0.0, 0))
            bands[key] = (n + 1, chances + node.chance, accepted + (node.status in ACCEPTED_STATUSES))
    return [ChanceBand(sources, round(band * width, 3), n, round(chances / n, 3), round(accepted / n, 3))
            for (sources, band), (n, chances, accepted) in sorted(bands.items())]
