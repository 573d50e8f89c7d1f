"""Sampling: the settings (temperature, top-p, seed), the target's sampling distribution, and lossless
speculative sampling over a draft tree.

Two rules verify a sampled tree; every drafting method's `acceptance` parameter picks one. `seeded`
(`coupled_accept`, the default) accepts a child exactly where its token is the seed's draw at that position
(accept.position_noise), so every method emits plain decoding's tokens for a seed. `standard` (`sampling_accept`)
is speculative sampling with recursive rejection among siblings and the session's coins: the output follows p
exactly, but its tokens depend on the tree, and a sampled draw goes first and must reach the verifier uncut.
RAPID's p_hat (eta > 0) replaces p in that rule and is declared lossy.

Design notes: docs/design.md, "specviz/accept/sampling.py".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from specviz.accept.position_noise import PositionNoise
from specviz.accept.verification import Verification, make_verification
from specviz.records.charts import PositionChart
from specviz.runtime.verify_output import DeviceSummary
from specviz.tree.draft_tree import ROOT, DraftTree
from specviz.errors import SpecvizError, quoted
from specviz.params import Param, finite_number

TAIL_FRACTION = 0.1   # RAPID: p_hat entries below this fraction of its maximum keep the target's value
EMPTY_MASS = 1e-12    # a residual with less mass than this is treated as empty (see _draw)
CHART_TOP = 6         # tokens per distribution kept for the app's p / q / p_hat chart

SEEDED, STANDARD = "seeded", "standard"
# every drafting method takes it; only a temperature > 0 reads it (greedy verification has one rule)
ACCEPTANCE_PARAM = Param("acceptance", SEEDED, 0, 0, str,
                         "at temperature > 0: seeded = accept a draft where it is the seed's draw (the same tokens "
                         "as ar with that seed); standard = speculative sampling's min(1, p/q) with recursive "
                         "rejection over siblings (more drafts accepted, tokens depend on the tree)",
                         choices=(SEEDED, STANDARD))
ACCEPTANCE_PROMISES = {
    SEEDED: "the seed's tokens: every method emits ar's tokens for this seed",
    STANDARD: ("the target's distribution with more drafts accepted; the tokens depend on the tree (a fixed budget "
               "repeats them for a seed, budget auto cuts by measured time)"),
}


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    @classmethod
    def checked(cls, temperature=0.0, top_p=1.0, seed=0) -> "SamplingSettings":
        """Parse and range-check what a user typed; one clear message per bad value ("nan", "inf", 1e400, a
        list or an object included)."""
        temperature = finite_number("temperature", temperature, "a number between 0 and 5")
        if not 0.0 <= temperature <= 5.0:
            raise SpecvizError(f"temperature must be between 0 and 5, got {temperature:g}.")
        top_p = finite_number("top_p", top_p, "a number in (0, 1]")
        if not 0.0 < top_p <= 1.0:
            raise SpecvizError(f"top_p must be in (0, 1], got {top_p:g}.")
        wanted = "a whole number between 0 and 2^63 - 1"
        # ASCII digits only (str.isdigit() admits "²", which int() refuses), and no more than 2^63 has (int() of
        # 5,000 digits raises past Python's digit limit): exact, where a seed past 2^53 does not survive float()
        if isinstance(seed, str) and re.fullmatch(r"[0-9]{1,19}", seed.strip()):
            seed = int(seed.strip())
        if isinstance(seed, bool):
            raise SpecvizError(f"seed must be {wanted}, got {quoted(seed)}.")
        if not isinstance(seed, int):
            as_float = finite_number("seed", seed, wanted)
            if as_float != int(as_float):
                raise SpecvizError(f"seed must be {wanted}, got {quoted(seed)}.")
            seed = int(as_float)
        if not 0 <= seed < 2 ** 63:
            raise SpecvizError(f"seed must be {wanted}, got {quoted(seed)}.")
        exact = seed
        return cls(temperature, top_p, exact)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """softmax(logits / T) restricted to the nucleus (the fewest best tokens holding top_p of the mass,
    the one crossing top_p included), renormalised; float64 on the CPU (rows are drawn from there)."""
    probs = torch.softmax(logits.detach().double().cpu() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs   # mass of the better tokens
        sorted_probs[before >= top_p] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def augmented_target(r: torch.Tensor, q: torch.Tensor, eta: float) -> torch.Tensor:
    """RAPID's p_hat from the current residual r and the draft's q (see the module doc)."""
    if eta == 0.0:
        return r
    p_hat = torch.softmax(torch.log(r) + eta * (q - r), dim=-1)
    tail = p_hat < TAIL_FRACTION * p_hat.max()
    return torch.where(tail, r, p_hat)


def output_distribution(p: torch.Tensor, q: torch.Tensor, p_hat: torch.Tensor) -> torch.Tensor:
    """What one sampled proposal from q, tested against p_hat with p's residual, emits."""
    kept = torch.minimum(q, p_hat)
    left = (p - kept).clamp_min(0.0)
    beta = float(kept.sum())
    if float(left.sum()) <= EMPTY_MASS:
        return kept / kept.sum()
    return kept + (1.0 - beta) * left / left.sum()


def _draw(residual: torch.Tensor, fallback: torch.Tensor, generator: torch.Generator) -> tuple[int, bool]:
    """A token from the residual; an empty residual (an event of probability zero that rounding can still
    produce) draws from the node's target distribution instead, and says so."""
    total = float(residual.sum())
    empty = not total > EMPTY_MASS
    weights = fallback if empty else residual / total
    return int(torch.multinomial(weights.float(), 1, generator=generator).item()), empty


def _chart(p: torch.Tensor, q: torch.Tensor | None, p_hat: torch.Tensor | None,
           out: torch.Tensor | None) -> PositionChart:
    """The top tokens of p, q and p_hat at one node, for the app's side-by-side bars."""
    top = min(CHART_TOP, p.shape[-1])
    ids = set(p.topk(top).indices.tolist())
    for dist in (q, p_hat):
        if dist is not None:
            ids.update(dist.topk(top).indices.tolist())
    ids = sorted(ids, key=lambda t: -float(p[t]))
    shown_p = [round(float(p[t]), 5) for t in ids]
    if q is None:
        return PositionChart(tokens=ids, p=shown_p)
    return PositionChart(tokens=ids, p=shown_p, q=[round(float(q[t]), 5) for t in ids],
                         p_hat=[round(float(p_hat[t]), 5) for t in ids], out=[round(float(out[t]), 5) for t in ids],
                         tv=round(0.5 * float((out - p).abs().sum()), 5))  # output vs the target's own distribution


def coupled_accept(tree: DraftTree, logits: torch.Tensor, settings: SamplingSettings, noise: PositionNoise,
                   root_position: int, summary: DeviceSummary | None = None) -> Verification:
    """Lossless sampled verification by the seed's draws: after each accepted node the target's token is
    its draw at the next position (argmax log p + g, accept.position_noise); the child with that token, if
    any, is accepted and the walk goes on, else the draw is the bonus. root_position: the root's index in
    the context (a node at depth d sits at root_position + d)."""
    path, node = [], ROOT
    compared: set[int] = set()
    charts: dict[int, PositionChart] = {}
    while True:
        p = sampling_probs(logits[node], settings.temperature, settings.top_p)
        q = tree.draft_dists.get(node)
        q = None if q is None else q.double().cpu()
        charts[node] = _chart(p, q, *((p, p) if q is not None else (None, None)))  # p_hat = p: emits p
        token = noise.draw(p, root_position + tree.depths[node] + 1)
        compared.update(tree.children(node))
        child = tree.child_with_token(node, token)
        if child is None:
            break
        path.append(child)
        node = child
    verification = make_verification(tree, logits, path, token, compared, summary=summary)
    verification.charts = charts
    verification.empty_residuals = 0
    return verification


def sampling_accept(tree: DraftTree, logits: torch.Tensor, settings: SamplingSettings, generator: torch.Generator,
                    eta: float = 0.0, summary: DeviceSummary | None = None) -> Verification:
    """Speculative sampling over the tree with the generator's coins: the `standard` rule (eta = 0,
    lossless; its tokens depend on the tree) and RAPID's retrieval-augmented target (eta > 0, lossy)."""
    path, node = [], ROOT
    compared: set[int] = set()
    transferred: set[int] = set()
    charts: dict[int, PositionChart] = {}
    empty_residuals = 0
    while True:
        p = sampling_probs(logits[node], settings.temperature, settings.top_p)
        residual = p.clone()
        q = tree.draft_dists.get(node)
        q = None if q is None else q.double().cpu()
        p_hat = None if q is None else augmented_target(p, q, eta)
        charts[node] = _chart(p, q, p_hat, None if q is None else output_distribution(p, q, p_hat))
        accepted_child = None
        drawn = [child for child in tree.children(node) if tree.draws(child)]
        if len(drawn) > 1 or any(tree.draws(child) > 1 for child in drawn):
            raise ValueError("a sampled draft draws one child per node (a chain)")
        for child in drawn:                        # the draw from q first
            compared.add(child)
            token = tree.tokens[child]
            r_hat = augmented_target(residual, q, eta)
            coin = torch.rand((), generator=generator).item()
            if coin <= min(1.0, float(r_hat[token]) / float(q[token])):
                accepted_child = child
                if coin > min(1.0, float(residual[token]) / float(q[token])):
                    transferred.add(child)   # p alone would have refused it with this coin
            else:
                left = torch.maximum(residual - r_hat, residual - q).clamp_min(0.0)
                total = float(left.sum())
                residual = left / total if total > EMPTY_MASS else left
        if accepted_child is None:
            for child in tree.children(node):      # then the fixed proposals, in the tree's order
                if not tree.is_deterministic(child):
                    continue
                compared.add(child)
                token = tree.tokens[child]
                total = float(residual.sum())
                if total > EMPTY_MASS and torch.rand((), generator=generator).item() < float(residual[token]) / total:
                    accepted_child = child
                    break
                residual[token] = 0.0
        if accepted_child is None:
            bonus, empty = _draw(residual, p, generator)
            empty_residuals += empty
            break
        path.append(accepted_child)
        node = accepted_child
    verification = make_verification(tree, logits, path, bonus, compared, transferred=transferred, summary=summary)
    verification.charts = charts
    verification.empty_residuals = empty_residuals
    return verification

