"""One run mode's greedy tokens against another's on the same prompts (`dev mode-diff`): where they part, and
whether the parting is a numeric tie (both modes' top-2 margins there below engine.divergence.MODES_TIE_THRESHOLD) or
a real difference of the two computations (the gguf mode quantises its activations to 8 bits: it is another
model's arithmetic, not a bug, but its differences are counted, not hidden)."""

from __future__ import annotations

from typing import Callable

from specviz.engine.divergence import MODES_TIE_THRESHOLD, classify
from specviz.engine.run import run_method
from specviz.studies.suite import SuiteItem
from specviz.runtime.prompts import encode


def mode_differences(lm, reference_lm, suite: list[SuiteItem], max_new_tokens: int,
                     log: Callable[[str], None] = lambda line: None) -> list[dict]:
    """Per prompt: ar in lm's mode against ar in reference_lm's (the same weights), the verdict and margins."""
    rows = []
    for item in suite:
        prompt_ids = encode(lm.tokenizer, item.messages, lm.max_context)
        limit = item.limit(max_new_tokens)
        ours = run_method(lm, "ar", prompt_ids=prompt_ids, max_new_tokens=limit)
        reference = run_method(reference_lm, "ar", prompt_ids=prompt_ids, max_new_tokens=limit)
        found = classify(reference.output_ids, reference.margins, ours.output_ids, ours.margins,
                         MODES_TIE_THRESHOLD)
        verdict = "yes" if found.identical else "tie" if found.verdict.startswith("tie") else "real"
        rows.append({"id": item.id, "category": item.category, "tokens": len(ours.output_ids), "verdict": verdict,
                     "position": found.position, "margin": found.margin, "reference_margin": found.reference_margin})
        log(f"{item.id}: {verdict}" + (f" at token {found.position} (margins {found.reference_margin:.3g} in "
                                        f"{reference_lm.mode}, {found.margin:.3g} in {lm.mode})"
                                        if found.position is not None and found.margin is not None else ""))
    return rows
