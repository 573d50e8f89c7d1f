"""Is a difference from greedy `ar` a numeric tie or a bug?

Two greedy runs of the same model can part ways when, at some position, the target's two best tokens
are so close that a change of kernel (a 1-token forward against a 16-token tree forward, fp32 against
bf16) swaps them. At the first position where a method's output differs from `ar`'s we look at the
target's top-2 logit margin in both runs: if both are below the threshold the difference is a tie at
k (`tie@k`, numerics); otherwise it is a `MISMATCH` (a bug, or a lossy method doing what it says).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Largest top-2 logit margin that the kernels and dtypes used here can swap. Measured: fp32 forwards
# of different block sizes differ by about 1e-4 in a logit; bf16 against bf16 by up to about 0.3.
TIE_THRESHOLD = {torch.float32: 0.01, torch.bfloat16: 0.5, torch.float16: 0.5}
# Between two run modes (the gguf mode's 8-bit activations against fp32): the largest top-2 margin their numbers
# can swap, as bf16's against fp32 (the two forwards' logits differ by a few tenths at most: tests/test_gguf_mode.py)
MODES_TIE_THRESHOLD = 0.5


def tie_threshold(dtype: torch.dtype) -> float:
    return TIE_THRESHOLD.get(dtype, 0.5)


def top2_margins(logits: torch.Tensor) -> list[float]:
    """Top-1 minus top-2 logit of every row of (rows, vocab)."""
    top = torch.topk(logits.float(), 2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


@torch.inference_mode()
def recompute_margin(lm, prompt_ids: list[int], output_ids: list[int], position: int) -> float:
    """The margin at output position `position` from one plain forward of prompt + output[:position]
    (for runs that kept no margins: transformers' generate())."""
    ids = torch.tensor([list(prompt_ids) + list(output_ids[:position])], device=lm.device)
    return top2_margins(lm.model(input_ids=ids).logits[0, -1:])[0]


@dataclass
class Divergence:
    verdict: str                 # "yes" (identical), "tie@k", "MISMATCH", or "lossy@k" for a declared-lossy method
    position: int | None = None  # first differing output position
    reference_token: int | None = None
    token: int | None = None
    reference_margin: float | None = None
    margin: float | None = None
    threshold: float | None = None

    @property
    def identical(self) -> bool:
        return self.verdict == "yes"

    def describe(self, token_text=str) -> str:
        """One line for the app and the CLI."""
        if self.identical:
            return "identical to greedy ar"
        if self.reference_margin is None or self.margin is None:
            return f"{self.verdict}: one run stopped at output token {self.position} where the other went on"
        where = (f"at output token {self.position}: ar has {token_text(self.reference_token)!r}, this run "
                 f"{token_text(self.token)!r}; top-2 margins {self.reference_margin:.4g} (ar) and "
                 f"{self.margin:.4g} (this run)")
        if self.verdict.startswith("tie"):
            return f"numeric tie {where}, both below {self.threshold:g}"
        if self.verdict.startswith("lossy"):
            return f"differs (the method is lossy with these settings) {where}"
        return f"MISMATCH {where}: at least one margin is at or above {self.threshold:g}, not a numeric tie"


def first_difference(reference: list[int], output: list[int]) -> int | None:
    for k, (a, b) in enumerate(zip(reference, output)):
        if a != b:
            return k
    return None if len(reference) == len(output) else min(len(reference), len(output))


def classify(reference: list[int], reference_margins: list[float], output: list[int], margins: list[float],
             threshold: float, lossless: bool = True) -> Divergence:
    """Compare a run with `ar`'s; margins are per output token, as each run computed them."""
    k = first_difference(reference, output)
    if k is None:
        return Divergence("yes")
    if k >= len(reference) or k >= len(output):
        # one run stopped early (EOS or a limit) where the other went on: the tokens differ at k
        return Divergence("MISMATCH" if lossless else f"lossy@{k}", position=k, threshold=threshold)
    ref_margin, margin = float(reference_margins[k]), float(margins[k])
    if not lossless:
        verdict = f"lossy@{k}"
    elif ref_margin < threshold and margin < threshold:
        verdict = f"tie@{k}"
    else:
        verdict = "MISMATCH"
    return Divergence(verdict, k, int(reference[k]), int(output[k]), ref_margin, margin, threshold)
