"""Sampling: every acceptance rule reproduces the target's distribution on toy vocabularies with known p
and q (and RAPID's eta > 0 provably does not); the settings refuse bad values; seeded runs repeat."""

import numpy as np
import pytest
import torch

from specviz.accept.position_noise import PositionNoise
from specviz.accept.sampling import (
    SamplingSettings,
    _draw,
    coupled_accept,
    augmented_target,
    output_distribution,
    sampling_accept,
    sampling_probs,
)
from specviz.errors import SpecvizError
from specviz.tree.draft_tree import DraftTree

SETTINGS = SamplingSettings(temperature=1.0)


def chi_square_p(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    """p-value of Pearson's chi-square test of counts against probabilities (bins of expected count < 5
    are pooled into one)."""
    total = counts.sum()
    expected = expected_probs * total
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
        if expected[-1] == 0:
            counts, expected = counts[:-1], expected[:-1]
    stat = float(((counts - expected) ** 2 / expected).sum())
    dof = len(counts) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def run_trials(make_tree, logits_of, trials: int, eta: float = 0.0, seed: int = 0, tokens: int = 1) -> np.ndarray:
    """Counts of the first committed token (or of the first two, as a flat index) over many trials."""
    generator = torch.Generator().manual_seed(seed)
    vocab = logits_of(None).shape[-1]
    counts = np.zeros(vocab ** tokens)
    for _ in range(trials):
        tree = make_tree(generator)
        out = sampling_accept(tree, logits_of(tree), SETTINGS, generator, eta=eta).accepted_tokens
        if tokens == 1:
            counts[out[0]] += 1
        else:
            if len(out) < 2:   # only the bonus: the second token comes from the next step, at its own row
                second = int(torch.multinomial(torch.softmax(CONDITIONAL[out[0]], -1), 1, generator=generator))
                out = out + [second]
            counts[out[0] * vocab + out[1]] += 1
    return counts


P = torch.tensor([0.1, 0.2, 0.3, 0.4])
Q = torch.tensor([0.4, 0.3, 0.2, 0.1])
CONDITIONAL = torch.log(torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1],
                                      [0.25, 0.25, 0.25, 0.25], [0.1, 0.1, 0.1, 0.7]]))


def flat_logits(tree):
    """Every node's row is P (the root's and any child's)."""
    return torch.log(P).expand(1 if tree is None else len(tree), 4).clone()


def sampled_child(tree: DraftTree, parent: int, q: torch.Tensor, generator) -> None:
    tree.draft_dists[parent] = q
    token = int(torch.multinomial(q, 1, generator=generator))
    tree.add(parent, token, "model", draws=1, draft_prob=float(q[token]))


def test_deterministic_siblings_keep_p():
    def make(generator):
        tree = DraftTree(0)
        tree.add_path([3], "retrieval")
        tree.add_path([1], "logits")
        return tree
    counts = run_trials(make, flat_logits, 6000)
    assert chi_square_p(counts, P.numpy()) > 1e-3


def test_sampled_draft_keeps_p():
    def make(generator):
        tree = DraftTree(0)
        sampled_child(tree, 0, Q, generator)
        return tree
    counts = run_trials(make, flat_logits, 6000)
    assert chi_square_p(counts, P.numpy()) > 1e-3


def test_mixed_proposals_keep_p():
    """Retrieved tokens and a draw from q under one parent, the draw inserted first (a draw may equal a
    retrieved token: one node, tried once per proposal)."""
    def make(generator):
        tree = DraftTree(0)
        sampled_child(tree, 0, Q, generator)
        tree.add_path([2], "retrieval")
        tree.add_path([3], "logits")
        return tree
    counts = run_trials(make, flat_logits, 8000)
    assert chi_square_p(counts, P.numpy()) > 1e-3


def test_second_token_of_a_sampled_chain_keeps_the_joint():
    """Two levels drawn from q: the first two committed tokens follow p(t1) p(t2 | t1)."""
    def make(generator):
        tree = DraftTree(0)
        sampled_child(tree, 0, Q, generator)
        sampled_child(tree, 1, torch.tensor([0.25, 0.25, 0.25, 0.25]), generator)
        return tree

    def logits_of(tree):
        if tree is None:
            return torch.zeros(1, 4)
        rows = [torch.log(P)] + [CONDITIONAL[tree.tokens[n]] for n in range(1, len(tree))]
        return torch.stack(rows)
    counts = run_trials(make, logits_of, 12000, tokens=2)
    joint = (P[:, None] * torch.softmax(CONDITIONAL, -1)).flatten().numpy()
    assert chi_square_p(counts, joint) > 1e-3


def test_the_test_can_fail():
    """The chi-square check rejects a rule that ignores p (a draft always accepted)."""
    generator = torch.Generator().manual_seed(0)
    counts = np.zeros(4)
    for _ in range(4000):
        counts[int(torch.multinomial(Q, 1, generator=generator))] += 1
    assert chi_square_p(counts, P.numpy()) < 1e-6


def test_eta_zero_is_p_and_eta_positive_is_not():
    p, q = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.9, 0.1], dtype=torch.float64)
    assert torch.equal(augmented_target(p, q, 0.0), p)
    # the example: eta = 5 follows the drafter, (.9, .1), and the empirical run agrees
    expected = output_distribution(p, q, augmented_target(p, q, 5.0))
    assert torch.allclose(expected, q, atol=1e-9)

    def make(generator):
        tree = DraftTree(0)
        sampled_child(tree, 0, q.float(), generator)
        return tree

    def logits_of(tree):
        return torch.log(p.float()).expand(1 if tree is None else len(tree), 2).clone()
    counts = run_trials(make, logits_of, 4000, eta=5.0)
    assert chi_square_p(counts, q.numpy()) > 1e-3
    assert chi_square_p(counts, p.numpy()) < 1e-6


def test_transferred_status_marks_what_eta_changed():
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.1, 0.9])
    generator = torch.Generator().manual_seed(1)
    statuses = []
    for _ in range(300):
        tree = DraftTree(0)
        tree.draft_dists[0] = q
        tree.add(0, 1, "model", draws=1)
        logits = torch.log(p).expand(2, 2).clone()
        statuses.append(sampling_accept(tree, logits, SETTINGS, generator, eta=10.0).statuses[1])
    # p alone accepts token 1 with 0.5 / 0.9; p_hat raises that to 1: the gap is marked transferred
    share = statuses.count("transferred") / len(statuses)
    assert 0.3 < share < 0.6 and "rejected" not in statuses


def test_empty_residual_draws_from_p_instead_of_nan():
    fallback = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    token, empty = _draw(torch.zeros(3, dtype=torch.float64), fallback, torch.Generator().manual_seed(0))
    assert (token, empty) == (1, True)
    # q == p: every draw is accepted, and the residual max(p - q, 0) (all zero) is never drawn from
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        tree = DraftTree(0)
        sampled_child(tree, 0, P, generator)
        verification = sampling_accept(tree, flat_logits(tree), SETTINGS, generator)
        assert verification.path == [1]


def test_top_p_keeps_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.allclose(sampling_probs(logits, 1.0, 0.8)[0], torch.tensor([0.625, 0.375, 0, 0], dtype=torch.float64))
    assert torch.allclose(sampling_probs(logits, 1.0, 0.85)[0],
                          torch.tensor([0.5, 0.3, 0.15, 0], dtype=torch.float64) / 0.95)
    assert torch.allclose(sampling_probs(logits, 1.0, 1.0)[0], torch.exp(logits[0]).double())


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"seed": 1.5}, "seed"), ({"seed": "abc"}, "seed"),
    ({"seed": -1}, "seed")])
def test_settings_refuse_bad_values(kwargs, message):
    with pytest.raises(SpecvizError, match=message):
        SamplingSettings.checked(**kwargs)


def test_a_draw_with_siblings_chosen_knowing_it_keeps_p():
    """The head's shape under the standard rule's draw-first order: a child drawn from q, and a fixed
    sibling that is q's best token other than the draw (it depends on the draw)."""
    def make(generator):
        tree = DraftTree(0)
        sampled_child(tree, 0, Q, generator)
        drawn = tree.tokens[1]
        best_other = max((t for t in range(4) if t != drawn), key=lambda t: float(Q[t]))
        tree.add(0, best_other, "model", draft_prob=float(Q[best_other]))
        return tree
    counts = run_trials(make, flat_logits, 4000, seed=11)
    assert chi_square_p(counts, P.numpy()) > 1e-3


def test_the_standard_rule_accepts_what_min_p_q_allows_and_the_seeded_rule_less():
    """The issue's example, p = (.5, 0, .5) and q = (0, .5, .5): speculative sampling accepts a draw from q
    with probability sum min(p, q) = 1/2; the seed's Gumbel coupling (the same noise draws the draft and
    the target's token) accepts it 1/3 of the time. Both emit p."""
    p = torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64)
    q = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    logits = torch.log(p).float()[None].expand(2, 3).clone()
    trials = 4000
    standard, seeded = np.zeros(3), np.zeros(3)
    accepted = {"standard": 0, "seeded": 0}
    generator = torch.Generator().manual_seed(5)
    for seed in range(trials):
        noise = PositionNoise(seed)
        tree = DraftTree(0)
        tree.draft_dists[0] = q.float()
        tree.add(0, noise.draw(q, 1), "model", draws=1)
        out = sampling_accept(tree, logits, SETTINGS, generator).accepted_tokens
        standard[out[0]] += 1
        accepted["standard"] += len(out) > 1
        out = coupled_accept(tree, logits, SETTINGS, noise, 0).accepted_tokens
        seeded[out[0]] += 1
        accepted["seeded"] += len(out) > 1
    assert abs(accepted["standard"] / trials - 1 / 2) < 0.03
    assert abs(accepted["seeded"] / trials - 1 / 3) < 0.03
    for counts in (standard, seeded):
        assert counts[1] == 0 and chi_square_p(counts[[0, 2]], np.array([0.5, 0.5])) > 1e-3
