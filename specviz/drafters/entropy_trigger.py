"""ReSpec's entropy-guided trigger: retrieve only when the recent context was predictable.

For every suffix length k = 1..l the key is the last k committed tokens and H_k the mean entropy (nats)
of the target's distributions over those positions; C_k = H_k + lambda_e / k trades entropy against key
length, k* = argmin C_k, H_min = H_k*, and retrieval fires iff H_min <= theta_entropy and the key occurred
before. The paper's P_t (the distribution after the newest token) only exists after this step's verify
forward, so the distributions used are the ones that predicted each key token: P_{t-k} .. P_{t-1}.
"""

from __future__ import annotations

import math

import torch

from specviz.records.notes import TriggerDecision


def entropies(logits: torch.Tensor) -> list[float]:
    """Shannon entropy (nats) of the softmax of every row of logits (n, vocab)."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return (-(log_probs.exp() * log_probs).sum(-1)).tolist()


class EntropyTrigger:
    def __init__(self, lookback: int = 3, lambda_e: float = 0.5, threshold: float = 1.5):
        self.lookback, self.lambda_e, self.threshold = lookback, lambda_e, threshold
        self.history: list[float] = [math.nan]  # history[j]: entropy of the distribution that predicted token j

    def record(self, values: list[float]) -> None:
        """Entropies of the distributions that predicted the next committed tokens, in order."""
        self.history.extend(values)

    def decide(self, context: list[int], count_matches) -> TriggerDecision:
        """count_matches(key) -> earlier occurrences of the key (the retrieval index)."""
        usable = min(self.lookback, len(context) - 1, len(self.history) - 1)
        recent = self.history[len(context) - usable:len(context)] if usable > 0 else []
        hs, cs = [], []
        for k in range(1, len(recent) + 1):
            h = sum(recent[-k:]) / k
            hs.append(h)
            cs.append(h + self.lambda_e / k)
        if not hs:
            return TriggerDecision([], [], 0, math.inf, [], 0, False)
        best = min(range(len(cs)), key=lambda i: (cs[i], -i))  # ties: the longer key
        key = context[-(best + 1):]
        matches = count_matches(key)
        return TriggerDecision(entropies=hs, confidences=cs, key_length=best + 1, h_min=hs[best], key=list(key),
                               matches=matches, fired=hs[best] <= self.threshold and matches > 0)
