"""Predicted against measured speedup over `ar` on a suite: each prompt runs the method with `ar` stepped
between its steps (engine.paired_baseline, the app's way), and the planner's prediction is set beside the
measurement with the three factors of the gap (engine.prediction); beside it, the predicted accepted drafts' error
(pooled over the suite's planned steps) and the chances per source set and band against what the target accepted.
RELIABILITY_MIN_NODES keeps the table to bands with enough nodes to read."""

from __future__ import annotations

from dataclasses import asdict

from specviz.engine.paired_baseline import PairedBaseline
from specviz.engine.prediction import (BAND_WIDTH, PredictionError, SpeedupCheck, ar_ms_per_token,
                                       chance_reliability, speedup_check)
from specviz.engine.run import warm_up
from specviz.engine.session import Session
from specviz.studies.suite import SuiteItem
from specviz.runtime.loading import LoadedModel

RELIABILITY_MIN_NODES = 20


def predicted_against_measured(lm: LoadedModel, suite: list[SuiteItem], method: str, max_new_tokens: int,
                               params: dict | None = None, draft=None) -> dict:
    """Per prompt and over the suite (all steps pooled): predicted and measured speedup, and the factors."""
    warm_up(lm, method, suite[0].messages, params=params, draft=draft)
    rows, pooled_records, pooled_ar = [], [], []
    for item in suite:
        limit = item.limit(max_new_tokens)
        session = Session(lm, method, params, draft=draft).start(item.messages)
        paired = PairedBaseline(session)
        while not session.finished and len(session.output_ids) < limit:
            session.step(limit)
            paired.keep_up()
        rows.append({"id": item.id, "category": item.category,
                     **_row(speedup_check(session.records, ar_ms_per_token(paired.ar.records)))})
        pooled_records += session.records
        pooled_ar += paired.ar.records
    error = PredictionError.of(pooled_records)
    return {"method": method, "max_new_tokens": max_new_tokens, "prompts": rows,
            "pooled": _row(speedup_check(pooled_records, ar_ms_per_token(pooled_ar))),
            "prediction_error": asdict(error) if error is not None else None,
            "reliability": [asdict(band) for band in chance_reliability(pooled_records)]}


def _row(c: SpeedupCheck) -> dict:
    def r(value):
        return None if value is None else round(value, 3)
    return {"predicted": r(c.predicted), "measured": r(c.measured), "accepted_factor": r(c.accepted_factor),
            "time_factor": r(c.time_factor), "ar_factor": r(c.ar_factor), "expected_tokens": r(c.expected_tokens),
            "tokens": c.tokens, "priced_ms": r(c.priced_ms), "taken_ms": r(c.taken_ms),
            "ar_priced_ms": r(c.ar_priced_ms), "ar_ms": r(c.ar_ms), "steps": c.steps}


def format_table(report: dict) -> str:
    lines = [f"{report['method']}: predicted vs measured speedup over ar (ar stepped between the run's steps), "
             f"{report['max_new_tokens']} new tokens",
             f"{'prompt':<28} {'predicted':>9} {'measured':>9} {'accepted':>9} {'time':>7} {'ar':>7}"]
    for row in [*report["prompts"], {"id": "POOLED", **report["pooled"]}]:
        cells = [f"{row[k]:.2f}" if row[k] is not None else "-" for k in
                 ("predicted", "measured", "accepted_factor", "time_factor", "ar_factor")]
        lines.append(f"{row['id']:<28} {cells[0]:>9} {cells[1]:>9} {cells[2]:>9} {cells[3]:>7} {cells[4]:>7}")
    lines.append("factors: accepted = tokens committed / expected; time = ms taken / ms priced; ar = ar's ms per "
                 "token / the one-token verify priced (measured / predicted = accepted x ar / time)")
    error = report.get("prediction_error")
    if error:
        lines.append(f"predicted vs measured accepted drafts over {error['steps']} planned steps: mean abs. error "
                     f"{error['mae']:.2f} (exact chances would miss by {error['spread']:.2f}), bias {error['bias']:+.2f}")
        if error.get("learnt_mae") is not None and error.get("unlearnt_mae") is not None:
            lines.append(f"the same trees after learning from their own step: {error['learnt_mae']:.2f}; priced by the "
                         f"drafters' estimates alone, never learnt: {error['unlearnt_mae']:.2f}")
    bands = [b for b in report.get("reliability", []) if b["nodes"] >= RELIABILITY_MIN_NODES]
    if bands:
        lines.append(f"the planner's chances against the target, per source set and band ({RELIABILITY_MIN_NODES}+ "
                     f"nodes):")
        lines.append(f"{'sources':<34} {'band':>9} {'nodes':>6} {'chance':>7} {'accepted':>9}")
        for b in bands:
            lines.append(f"{b['sources']:<34} {b['low']:>4.2f}-{b['low'] + BAND_WIDTH:<4.2f} {b['nodes']:>6} "
                         f"{b['mean_chance']:>7.2f} {b['accepted']:>9.2f}")
    return "\n".join(lines)
