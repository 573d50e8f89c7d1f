"""The cost-optimal tree (READER's Theorem 1), the one planner of every method (budget=auto).

The drafters have already drafted; the planner keeps the best-first prefix of their tree that maximises expected
committed tokens per millisecond, (1 + expected accepted drafts) / (draft and step time + verify cost), if it beats
plain decoding. A node's chance is learnt online per key (sources, depth, sibling position, drafter bucket) and
calibrated per source; the verify cost is the calibrated curve corrected online per size band. The draft time is the
same for every candidate, so Theorem 1's per-node draft times never enter.

Design notes: docs/design.md, "specviz/engine/planner.py".
"""

from __future__ import annotations

import itertools
import statistics
from collections import deque
from dataclasses import dataclass

import numpy as np

from specviz.engine.costmodel import CostModel
from specviz.records.plan import BudgetCut
from specviz.records.status import ACCEPTED_STATUSES, NodeStatus
from specviz.tree.draft_tree import DraftTree

MAX_DEPTH_KEY = 3   # depth 3 and deeper share estimates: a draft that got that far behaves alike
MAX_POSITION_KEY = 4
# how much faster than plain decoding a tree must promise to be drafted at all: 1.0 is Theorem 1's
# objective as it stands; a higher margin stopped paying once small trees cost little more than one token
# (docs/benchmarks.md, "Sweeps and parameters", the planner's plain-decoding margin)
PLAIN_MARGIN = 1.0
COST_BANDS = (1, 2, 5, 9, 17, 33, 65, 129)  # lower edges of the size bands the correction learns apart
# a band's correction is forgotten after this many forwards without one of its size: trees refused
# because a burst of load made them look slow are then priced from the bands still measured, and tried
STALE_AFTER = 32
CALIBRATION_PRIOR = 1.0   # per source, promised = got = this many drafts at the start (factor 1)
CALIBRATION_DECAY = 0.8   # per step in which the source had kept nodes
CALIBRATION_FADE = 0.98   # per step in which it had none
CALIBRATION_MAX = 1.5
# a drafted control token (one the chat template writes, not an end of sequence: `<|im_start|>`) is learnt apart and
# starts from the least prior: at a reply's first step the copy-logit row of the template's last token is the one
# the template's own turns left ("\n" -> `<|im_start|>` -> "assistant" ...), a chain every suite prompt was offered
# at 0.5-0.67 and none accepted (docs/benchmarks.md, "Issue 70: the reply's first step")
CONTROL_BUCKET = "control"
CONTROL_PRIOR = 0.05


def node_key(tree: DraftTree, node: int, control: frozenset[int] = frozenset()) -> tuple:
    """(sources, depth, position among siblings, drafter buckets): a drafter may tag its nodes with a
    'bucket' (e.g. how long the retrieval match was) so that unlike drafts are learnt apart; a control token
    (control: their ids) has the bucket CONTROL_BUCKET whatever its drafters said."""
    return node_key_and_prior(tree, node, control)[0]


def node_key_and_prior(tree: DraftTree, node: int,
                       control: frozenset[int] = frozenset()) -> tuple[tuple, float | None]:
    """node_key, and the drafter's own estimate of the node's chance (meta 'prior') if any source gave one
    (a control token: CONTROL_PRIOR)."""
    depth, position = min(tree.depths[node], MAX_DEPTH_KEY), min(tree.positions[node], MAX_POSITION_KEY)
    if control and tree.tokens[node] in control:
        return ("+".join(sorted(tree.sources[node])), depth, position, CONTROL_BUCKET), CONTROL_PRIOR
    node_meta = tree.meta[node]
    if len(node_meta) == 1:  # one source (most nodes): no joins to sort
        (source, meta), = node_meta.items()
        return (source, depth, position, str(meta["bucket"]) if "bucket" in meta else ""), meta.get("prior")
    sources = "+".join(sorted(tree.sources[node]))
    buckets = "+".join(sorted(str(m["bucket"]) for m in node_meta.values() if "bucket" in m))
    return (sources, depth, position, buckets), max((m["prior"] for m in node_meta.values() if "prior" in m),
                                                    default=None)


class AcceptanceModel:
    def __init__(self, prior: float = 0.5, prior_weight: float = 1.0, decay: float = 0.95,
                 control: frozenset[int] = frozenset()):
        """control: the model's control tokens (LoadedModel.control_ids), learnt apart from the text's."""
        self.prior, self.prior_weight, self.decay = prior, prior_weight, decay
        self.control = frozenset(control)
        self.accepted: dict[tuple, float] = {}
        self.compared: dict[tuple, float] = {}
        self.promised: dict[str, float] = {}  # per source: moving sums of kept nodes' chances ...
        self.got: dict[str, float] = {}       # ... and of how many of them were accepted

    def calibration(self, source: str) -> float:
        """How much of what this source's chances promise this session's text delivers."""
        return min(CALIBRATION_MAX, (self.got.get(source, 0.0) + CALIBRATION_PRIOR)
                   / (self.promised.get(source, 0.0) + CALIBRATION_PRIOR))

    def calibrated(self, tree: DraftTree, chances: list[float]) -> list[float]:
        """Unconditional chances times the smallest calibration among each node's sources (root: 1), siblings
        together at most their parent's: verification takes one child of a node, so a factor above 1 must not make
        the children likelier than the path to them (earlier siblings first, as node_chances shares). A factor per
        source set was tried and dropped (docs/benchmarks.md, "Dropped experiments")."""
        factors = {s: self.calibration(s) for s in set().union(*tree.sources[1:])}
        factor_of, sources, parents = factors.__getitem__, tree.sources, tree.parents
        out = [1.0] * len(tree)
        left = [1.0] * len(tree)  # per node: its chance not yet taken by its children
        for n in range(1, len(tree)):  # a parent's index is below its children's, an earlier sibling's below a later's
            parent = parents[n]
            chance = chances[n] * min(map(factor_of, sources[n]))
            if chance > left[parent]:
                chance = left[parent]
            left[parent] -= chance
            out[n] = left[n] = chance
        return out

    def observe_step(self, tree: DraftTree, chances: list[float], statuses: list[NodeStatus]) -> None:
        """chances: the verified tree's uncalibrated node chances; accepted nodes are the ones delivered."""
        promised: dict[str, float] = {}
        got: dict[str, float] = {}
        for node in range(1, len(tree)):
            for source in tree.sources[node]:
                promised[source] = promised.get(source, 0.0) + chances[node]
                got[source] = got.get(source, 0.0) + (statuses[node] in ACCEPTED_STATUSES)
        for source in set(self.promised) | set(promised):
            if source in promised:
                self.promised[source] = self.promised.get(source, 0.0) * CALIBRATION_DECAY + promised[source]
                self.got[source] = self.got.get(source, 0.0) * CALIBRATION_DECAY + got[source]
            else:
                self.promised[source] *= CALIBRATION_FADE
                self.got[source] *= CALIBRATION_FADE

    @staticmethod
    def coarse(key: tuple) -> tuple:
        """The key without the sibling position: what a position never tried yet borrows from."""
        return key[:2] + key[3:]

    def conditional(self, key: tuple, prior: float | None = None) -> float:
        """The key's own record, shrunk towards its coarse key's record, shrunk towards the prior (the
        drafter's own estimate when it gave one: a copy-logit probability, a retrieval share). Each record
        is (accepted + the estimate it shrinks towards x prior_weight) / (compared + prior_weight)."""
        prior = self.prior if prior is None else min(0.95, max(0.05, prior))
        accepted, compared, weight = self.accepted, self.compared, self.prior_weight
        coarse = self.coarse(key)
        coarse_estimate = (accepted.get(coarse, 0.0) + prior * weight) / (compared.get(coarse, 0.0) + weight)
        return (accepted.get(key, 0.0) + coarse_estimate * weight) / (compared.get(key, 0.0) + weight)

    def node_chances(self, tree: DraftTree) -> list[float]:
        """Unconditional acceptance chance of every node (root: 1); children are visited in sibling
        order and each gets at most what its earlier siblings leave of its parent's chance."""
        chances = [1.0] * len(tree)
        conditional, control = self.conditional, self.control
        for parent in range(len(tree)):
            children = tree.children(parent)
            if not children:
                continue
            left, reach = 1.0, chances[parent]
            for child in children:
                share = conditional(*node_key_and_prior(tree, child, control))
                if share > left:
                    share = left
                left -= share
                chances[child] = reach * share
        return chances

    def checkpoint(self):
        return dict(self.accepted), dict(self.compared), dict(self.promised), dict(self.got)

    def rollback(self, saved) -> None:
        self.accepted, self.compared = dict(saved[0]), dict(saved[1])
        self.promised, self.got = dict(saved[2]), dict(saved[3])

    def update(self, tree: DraftTree, statuses: list[NodeStatus]) -> None:
        """Learn from the nodes the target compared (accepted / relaxed / transferred / rejected)."""
        rejected = NodeStatus.REJECTED
        for node in range(1, len(tree)):
            status = statuses[node]
            if status in ACCEPTED_STATUSES or status == rejected:
                key = node_key(tree, node, self.control)
                hit = 1.0 if status != rejected else 0.0
                for level in (key, self.coarse(key)):
                    self.compared[level] = self.compared.get(level, 0.0) * self.decay + 1.0
                    self.accepted[level] = self.accepted.get(level, 0.0) * self.decay + hit


class OnlineCost:
    """The calibrated curve times a per-band correction: the median ratio measured / calibrated over
    the band's last few forwards (a median, so one stalled forward does not move it). A band is only
    measured when a tree of its size is verified, so its correction expires after stale_after forwards
    without one: otherwise trees measured during a burst of load (a browser rendering on the same cores)
    would look too dear for good, and the planner would never verify one again to learn otherwise."""

    def __init__(self, curve: CostModel, window: int = 15, trusted_after: int = 3, stale_after: int = STALE_AFTER):
        self.curve, self.window, self.trusted_after, self.stale_after = curve, window, trusted_after, stale_after
        self.samples: dict[int, deque] = {}
        self.ratio: dict[int, float] = {}
        self.forwards = 0                    # forwards observed
        self.last_seen: dict[int, int] = {}  # per band: self.forwards at its latest sample
        self._curve: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per largest: the curve's costs, bands
        self._band_ratios: np.ndarray | None = None  # per COST_BANDS entry; None: to be read again
        self._costs: dict[int, np.ndarray] = {}  # per largest: costs_ms(largest) under _band_ratios

    @staticmethod
    def band(q: int) -> int:
        return max(edge for edge in COST_BANDS if edge <= q)

    def cost_ms(self, q: int) -> float:
        return self.curve.cost_ms(q) * self._ratio(self.band(q))

    def costs_ms(self, largest: int) -> np.ndarray:
        """cost_ms(q) for q = 1..largest in one call (index q - 1), read-only. The planner asks every step:
        the curve's part is kept per size, the product with the correction until the correction changes."""
        curve = self._curve.get(largest)
        if curve is None:
            q = np.arange(1, largest + 1)
            curve = self._curve[largest] = (self.curve.costs_ms(largest),
                                            np.searchsorted(COST_BANDS, q, side="right") - 1)
        if self._band_ratios is None:
            self._band_ratios = np.array([self._ratio(band) for band in COST_BANDS])
            self._costs = {}
        costs = self._costs.get(largest)
        if costs is None:  # most steps: the correction has not changed, so neither have the costs
            curve_ms, bands = curve
            costs = self._costs[largest] = curve_ms * self._band_ratios[bands]
            costs.flags.writeable = False  # shared by the steps until the correction changes
        return costs

    def _ratio(self, band: int) -> float:
        ratio = self.ratio.get(band)
        if ratio is None:  # band not measured often enough: borrow the nearest trusted band's correction
            measured = sorted(self.ratio, key=lambda b: abs(b - band))
            ratio = self.ratio[measured[0]] if measured else 1.0
        return ratio

    def checkpoint(self):
        return ({band: list(samples) for band, samples in self.samples.items()}, dict(self.ratio),
                self.forwards, dict(self.last_seen))

    def rollback(self, saved) -> None:
        samples, ratio, self.forwards, last_seen = saved
        self.samples = {band: deque(kept, maxlen=self.window) for band, kept in samples.items()}
        self.ratio, self.last_seen = dict(ratio), dict(last_seen)
        self._band_ratios = None

    def observe(self, q: int, ms: float) -> None:
        band = self.band(q)
        self.forwards += 1
        self.last_seen[band] = self.forwards
        samples = self.samples.setdefault(band, deque(maxlen=self.window))
        samples.append(ms / self.curve.cost_ms(q))
        if len(samples) >= self.trusted_after:
            ratio = statistics.median(samples)
            if ratio != self.ratio.get(band):
                self.ratio[band] = ratio
                self._band_ratios = None
        for stale in [b for b, seen in self.last_seen.items() if self.forwards - seen > self.stale_after]:
            del self.samples[stale], self.last_seen[stale]
            if self.ratio.pop(stale, None) is not None:
                self._band_ratios = None


@dataclass(frozen=True)
class TreePlan:
    """plan_tree's answer: what to keep, and everything the step's record shows of the choice."""
    kept: list[int]              # the best-first nodes to keep (offered tree's ids)
    cut: BudgetCut               # the numbers behind the cut
    expected: list[float]        # expected accepted drafts of keeping the first k best-first nodes, k = 0..
    order: list[int]             # every ranked node best-first (at most max_nodes): kept = order[:cut.kept]
    chances: list[float]         # per offered node: its calibrated unconditional chance (root: 1)
    verify_ms: list[float]       # the verify cost of keeping the first k nodes (1 + k tokens), k = 0..


def best_first(tree: DraftTree, acceptance: AcceptanceModel, max_nodes: int,
               chances: list[float] | None = None) -> tuple[list[int], list[float]]:
    """The tree's nodes best-first by calibrated chance (a parent before its children), at most max_nodes,
    and the expected accepted drafts of keeping the first k of them (index k = 0..len(order)).
    chances: acceptance.node_chances(tree), where the caller has them already."""
    order, expected, _ = _best_first(tree, acceptance, max_nodes, chances)
    return order, expected


def _best_first(tree: DraftTree, acceptance: AcceptanceModel, max_nodes: int,
                chances: list[float] | None) -> tuple[list[int], list[float], list[float]]:
    """best_first, and the calibrated chances it ordered by."""
    chances = acceptance.calibrated(tree, chances if chances is not None else acceptance.node_chances(tree))
    order = tree.best_first(chances)[:max_nodes]
    return order, [0.0, *itertools.accumulate(chances[n] for n in order)], chances


def plan_tree(tree: DraftTree, acceptance: AcceptanceModel, cost, max_nodes: int, draft_ms: float = 0.0,
              overhead_ms: float = 0.0, margin: float = PLAIN_MARGIN,
              chances: list[float] | None = None) -> TreePlan:
    """Which best-first prefix of the tree to verify.
    cost: anything with cost_ms(q) and costs_ms(n) (a CostModel or an OnlineCost); draft_ms: this step's
    measured draft time and overhead_ms the rest of a step besides its forward (acceptance, updates, the
    record), both spent whatever is kept. A tree must promise more than `margin` times the rate of plain
    decoding (1 / (draft + overhead + one-token verify)) before it replaces it (margin > 1: a safety factor).
    chances: acceptance.node_chances(tree), where the caller has them already."""
    fixed = draft_ms + overhead_ms
    if tree.num_drafted == 0 or max_nodes <= 0:  # nothing to choose (the sources were silent): plain decoding
        one = cost.cost_ms(1)
        rate = 1.0 / (fixed + one)
        return TreePlan([], BudgetCut(offered=tree.num_drafted, kept=0, expected_accepted=0.0,
                                      draft_ms=round(draft_ms, 2), expected_tokens_per_s=round(1000 * rate, 2),
                                      overhead_ms=round(overhead_ms, 2)),
                        [0.0], [], [1.0] * len(tree), [round(one, 2)])
    order, expected, calibrated = _best_first(tree, acceptance, max_nodes, chances)
    # tokens per ms of every best-first prefix (index k: keep k nodes); plain decoding must be beaten by margin.
    # Python lists, not numpy: 65 numbers, and right after a forward each numpy call costs tens of us
    costs = cost.costs_ms(1 + len(order)).tolist()
    rates = [(1.0 + e) / (fixed + c) for e, c in zip(expected, costs)]
    best_keep = 0
    if len(order):
        candidate = max(range(1, len(rates)), key=rates.__getitem__)  # the first best, as np.argmax
        if rates[candidate] > margin * rates[0]:
            best_keep = candidate
    expected_kept = expected[best_keep]
    rate = rates[best_keep]
    return TreePlan(order[:best_keep],
                    BudgetCut(offered=tree.num_drafted, kept=best_keep, expected_accepted=round(expected_kept, 3),
                              draft_ms=round(draft_ms, 2), expected_tokens_per_s=round(1000 * rate, 2),
                              overhead_ms=round(overhead_ms, 2)),
                    [round(e, 3) for e in expected], order, calibrated, [round(c, 2) for c in costs])
