"""Sampling's charts: at every position the sampling rule visited, the top tokens of the target's p (and,
where a draft model sampled a child, its q, RAPID's p_hat and what the rule emits), for the app's bars."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PositionChart:
    tokens: list[int]                  # the tokens shown, most probable under p first
    p: list[float]                     # the target's sampling distribution over them
    q: list[float] | None = None       # the draft model's, where it sampled a child here
    p_hat: list[float] | None = None   # RAPID's retrieval-augmented target (p itself at eta = 0)
    out: list[float] | None = None     # what the rule emits here
    tv: float | None = None            # total-variation distance of the emitted distribution from p


@dataclass(frozen=True)
class SamplingCharts:
    charts: dict[int, PositionChart]   # per visited node (its children's position): node id -> chart
    empty_residuals: int = 0           # bonus draws whose residual was empty (drawn from p instead)

    @classmethod
    def from_dict(cls, data: dict) -> "SamplingCharts":
        # JSON keys are strings: the node ids come back as ints
        return cls(charts={int(node): PositionChart(**chart) for node, chart in data["charts"].items()},
                   empty_residuals=data.get("empty_residuals", 0))
