"""The numerics-aware lossless check: identical, a numeric tie, lossy or a MISMATCH, from both runs'
top-2 logit margins; bf16 differences are classified, not hidden."""

import pytest
import torch

from specviz.engine.divergence import classify, recompute_margin, tie_threshold
from specviz.engine.session import Session
from specviz.runtime.loading import load_model
from specviz.runtime.modes import why_not_precision

OPEN_PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a kite."}]


# ---- numerics-aware lossless check -------------------------------------------------------------------
def test_classify_tie_mismatch_lossy_and_identical():
    ref, ref_margins = [1, 2, 3, 4], [5.0, 0.004, 2.0, 2.0]
    assert classify(ref, ref_margins, [1, 2, 3, 4], ref_margins, 0.01).verdict == "yes"
    tie = classify(ref, ref_margins, [1, 9, 3, 4], [5.0, 0.002, 1.0, 1.0], 0.01)
    assert tie.verdict == "tie@1" and tie.position == 1 and tie.token == 9 and tie.reference_token == 2
    assert "numeric tie" in tie.describe(str)
    # the same difference where one run's margin is large is a bug, not numerics
    assert classify(ref, ref_margins, [1, 9, 3, 4], [5.0, 0.5, 1.0, 1.0], 0.01).verdict == "MISMATCH"
    assert classify([1, 2, 3, 4], [5.0] * 4, [1, 9, 3, 4], [5.0] * 4, 0.01).verdict == "MISMATCH"
    assert classify(ref, ref_margins, [1, 9], [5.0, 5.0], 0.01, lossless=False).verdict == "lossy@1"
    assert classify(ref, ref_margins, [1, 2], [5.0, 0.004], 0.01).verdict == "MISMATCH"  # stopped early


def test_session_margins_are_the_targets_top2_margins(lm):
    session = Session(lm, "racer", budget=16).start(OPEN_PROMPT)
    session.run(12)
    assert len(session.margins) == len(session.output_ids) == 12 and min(session.margins) >= 0
    for position in (0, 5, 11):
        again = recompute_margin(lm, session.prompt_ids, session.output_ids, position)
        assert abs(again - session.margins[position]) < 1e-3 * max(1.0, again)


@pytest.mark.slow
@pytest.mark.skipif(why_not_precision(torch.device("cpu"), torch.bfloat16) is not None,
                    reason="this CPU has no bf16 instructions: the model runs fp32 (test_modes checks the fallback)")
def test_bf16_differences_from_ar_are_classified_not_hidden():
    """In bf16 bitwise equality is not promised; every difference must be a tie (both margins small),
    never a MISMATCH."""
    lm16 = load_model(None, mode="bf16")
    threshold = tie_threshold(lm16.dtype)
    for messages in (OPEN_PROMPT, [{"role": "user", "content": "Repeat twice: red, green, blue."}]):
        ar = Session(lm16, "ar").start(messages)
        ar.run(32)
        racer = Session(lm16, "racer", budget=32).start(messages)
        racer.run(32)
        verdict = classify(ar.output_ids, ar.margins, racer.output_ids, racer.margins, threshold).verdict
        assert verdict == "yes" or verdict.startswith("tie@"), verdict
