"""How a step's tree was put together and sized: what each source was offered and proposed (the split),
and what the planner expected of the tree it kept (with budget=auto: where it cut the best-first order)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceShare:
    """One stage's part of the step's budget (Method.draft)."""
    offered: int        # draft nodes left to it when its stage drafted
    proposed: int       # nodes it proposed
    shared: int         # of those, nodes an earlier stage had proposed already (the trie union counts them once)


# per source, in stage order; None on a step record: the method has no draft stage (plain decoding)
SourceSplit = dict[str, SourceShare]


def split_from_dict(data: dict | None) -> SourceSplit | None:
    return None if data is None else {source: SourceShare(**share) for source, share in data.items()}


@dataclass(frozen=True)
class BudgetCut:
    """budget=auto: where the planner cut the best-first order of the offered nodes (planner.plan_tree)."""
    offered: int                    # draft nodes the sources offered
    kept: int                       # the best-first prefix kept (0: plain decoding pays best)
    expected_accepted: float        # expected accepted drafts of the kept prefix
    draft_ms: float                 # this step's measured draft time, spent whatever is kept
    expected_tokens_per_s: float    # what the kept tree promised: (1 + expected) / (draft + overhead + verify)
    # the rest of a step the planner prices whatever is kept (acceptance, cache update, drafters' updates, the
    # record), as the session measured it over its recent steps (0: a trace from before it was priced)
    overhead_ms: float = 0.0

    @property
    def fixed_ms(self) -> float:
        """What a step costs besides its verify forward."""
        return self.draft_ms + self.overhead_ms


@dataclass(frozen=True)
class PlanDecision:
    """What the planner expected of the verified tree, to set beside what the target accepted."""
    predicted_accepted: float                  # expected accepted drafts of the verified tree (calibrated)
    # expected accepted drafts of keeping the first k nodes best-first, k = 0..; None: not computed (no
    # draft stage, or sampled drafts that reach the verifier whole)
    expected_curve: list[float] | None = None
    cut: BudgetCut | None = None               # budget=auto only
    # budget=auto: the verify cost (ms) the planner priced keeping the first k nodes at, k = 0.. (1 + k tree
    # tokens, the calibrated curve under this session's online correction); None where it priced nothing
    verify_ms: list[float] | None = None
    # what the planner expected of the same verified tree once it had learnt from this step (it moves towards what
    # the target accepted as far as one step teaches it), and what the drafters' own estimates alone, never
    # learnt, expected of it (the planner's chances at a run's start); None: a trace recorded before they were kept
    learnt_accepted: float | None = None
    unlearnt_accepted: float | None = None

    @classmethod
    def from_dict(cls, data: dict) -> "PlanDecision":
        cut = data.get("cut")
        return cls(predicted_accepted=data["predicted_accepted"], expected_curve=data.get("expected_curve"),
                   cut=None if cut is None else BudgetCut(**cut), verify_ms=data.get("verify_ms"),
                   learnt_accepted=data.get("learnt_accepted"), unlearnt_accepted=data.get("unlearnt_accepted"))

    def promised_tokens_per_s(self, keep: int) -> float | None:
        """What keeping the first `keep` best-first nodes promised: (1 + expected) / (draft + overhead + verify)."""
        if self.cut is None or not self.verify_ms or not self.expected_curve or keep >= len(self.verify_ms) \
                or keep >= len(self.expected_curve):
            return None
        return 1000 * (1 + self.expected_curve[keep]) / (self.cut.fixed_ms + self.verify_ms[keep])
