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

import torch

_MASK64 = (1 << 64) - 1
CACHED_POSITIONS = 64   # a step's drafter and verifier read the same few positions: each is drawn once


def _splitmix64(value: int) -> int:
    """A 64-bit mixer (SplitMix64's finaliser): nearby (seed, position) pairs give unrelated streams."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


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
            stream = _splitmix64(self.seed ^ _splitmix64(int(position))) & ((1 << 63) - 1)
            generator = torch.Generator(device="cpu").manual_seed(stream)
            uniform = torch.rand(vocab, dtype=torch.float64, generator=generator)
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
