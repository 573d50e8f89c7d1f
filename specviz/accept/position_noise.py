"""The seed's draw at each position of the output, fixed before any tree is drafted.

A sampled token at output position t is argmax_v (log p_t(v) + g_t(v)), with g_t a vector of Gumbel noise
that depends on (seed, t) only: the Gumbel-max trick, so the token follows p_t exactly. Plain decoding and
every lossless speculative method read the same g_t, so with one seed they emit the same tokens, whatever
trees were drafted, whatever the planner kept and however loaded the machine was: a speculative step
accepts a draft exactly where its token is the target's draw at that position. A draft model that samples
from its own q uses the same noise (argmax log q + g_t): a sample from q that agrees with the target's draw
as often as q and p allow (Gumbel coupling), instead of an independent draw.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

CACHED_POSITIONS = 64   # a step's drafter and verifier read the same few positions: each is drawn once


def position_generator(seed: int, position: int) -> np.random.Generator:
    """Philox keyed by (seed, position), both whole 64-bit words: a counter-based generator, so every pair
    has its own stream and no two positions of a run share noise. (torch's CPU generator was seeded here
    before: it keeps the low 32 bits of its seed, so two positions of a run drew the same vector with
    probability about L^2 / 2^33, 0.8% at 8,192 tokens.)"""
    key = np.array([seed & 0xFFFFFFFFFFFFFFFF, position & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=key))


class PositionNoise:
    """Gumbel noise per output position for one seed; positions are absolute indices in the context."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._cache: OrderedDict[tuple[int, int], torch.Tensor] = OrderedDict()

    def gumbel(self, position: int, vocab: int) -> torch.Tensor:
        """(vocab,) float64 Gumbel(0, 1) noise, a pure function of (seed, position, vocab)."""
        key = (int(position), int(vocab))
        noise = self._cache.get(key)
        if noise is None:
            uniform = torch.from_numpy(position_generator(self.seed, int(position)).random(vocab))
            noise = -torch.log(-torch.log(uniform.clamp_(min=1e-300)))
            self._cache[key] = noise
            if len(self._cache) > CACHED_POSITIONS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return noise

    def draw(self, probs: torch.Tensor, position: int) -> int:
        """The token at `position` under distribution probs (vocab,): argmax log probs + noise; tokens of
        probability 0 (outside the nucleus) are never drawn."""
        scores = torch.log(probs.double()) + self.gumbel(position, probs.shape[-1])
        return int(torch.argmax(scores).item())
