"""Which of the target's hidden states a drafter reads at every position (its *features*).

The trained head and EAGLE-1/2 read the final norm's output, what the target's head reads (FINAL). EAGLE-3
reads three hidden states fused: those entering decoder layers 2, N // 2 and N - 3 of an N-layer target (low,
middle, high; SafeAILab/EAGLE collects them as it enters those layers), concatenated in that order. A forward
asked for a tap returns (n, width) fp32 features of that tap."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FeatureTap:
    """layers: the decoder layers whose input hidden states are concatenated, in order; () for the final
    norm's output (FINAL)."""
    layers: tuple[int, ...] = ()

    @property
    def final(self) -> bool:
        return not self.layers

    def width(self, hidden: int) -> int:
        return hidden * max(1, len(self.layers))

    def check(self, num_layers: int) -> None:
        bad = [i for i in self.layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"feature layers {bad} outside a model of {num_layers} layers")


FINAL = FeatureTap()


def eagle3_tap(num_layers: int) -> FeatureTap:
    """EAGLE-3's low, middle and high layers of an N-layer target, in the order it concatenates them."""
    return FeatureTap(tuple(i for i in range(num_layers) if i in (2, num_layers // 2, num_layers - 3)))


def tap_of(features) -> FeatureTap | None:
    """A forward's `features` argument as a tap: False / None: none; True: FINAL; a FeatureTap: itself."""
    if isinstance(features, FeatureTap):
        return features
    return FINAL if features else None
