"""One method at several values of one hyperparameter, against plain greedy `ar` on the same prompts."""

from __future__ import annotations

from typing import Callable

from specviz.core.models import LoadedModel
from specviz.core.prompts import encode
from specviz.core.session import Session
from specviz.methods import get_method
from specviz.tools.bench import BASELINE, params_for, run_once


def run_sweep(lm: LoadedModel, suite: list[dict], method: str, vary: str, values: list, max_new_tokens: int = 96,
              params: dict | None = None, budget="auto", draft: LoadedModel | None = None,
              log: Callable[[str], None] = lambda s: None) -> dict:
    """One method at several values of one parameter, interleaved per prompt after plain greedy `ar`:
    per category and value, MAT, tokens/s, speedup vs ar, the fraction of output tokens that differ
    from ar's (lossless) output, how often the entropy trigger fired and retrieval drafted, relaxed
    acceptances, and the mean draft / verify-forward milliseconds per step."""
    from specviz.core.token_diff import token_diff

    spec = get_method(method)
    fixed = params_for(method, params or {})
    settings = [spec.resolve_params({**fixed, vary: v}) for v in values]  # bad values fail before any run
    run_once(lm, method, encode(lm.tokenizer, suite[0]["messages"], lm.max_context), 8, settings[0], budget, draft)
    rows = []
    for item in suite:
        prompt_ids = encode(lm.tokenizer, item["messages"], lm.max_context)
        limit = int(item.get("max_new_tokens", max_new_tokens))
        reference = run_once(lm, BASELINE, prompt_ids, limit, {})
        rows.append({"id": item["id"], "category": item["category"], "value": BASELINE, "new_tokens":
                     reference["new_tokens"], "steps": reference["steps"], "wall_s": reference["wall_s"],
                     "differing": 0, "fired": 0, "retrieval_steps": 0, "relaxed": 0, "draft_ms": 0.0,
                     "forward_ms": 0.0})
        for value, setting in zip(values, settings):
            session = Session(lm, method, setting, budget=budget, draft=draft).start_ids(prompt_ids)
            session.run(limit)
            records = session.records
            rows.append({
                "id": item["id"], "category": item["category"], "value": value,
                "new_tokens": len(session.output_ids), "steps": len(records), "wall_s": session.stats()["wall_s"],
                "differing": token_diff(reference["output_ids"], session.output_ids).differing,
                "fired": sum(bool(r.entropy and r.entropy.get("fired")) for r in records),
                "retrieval_steps": sum(r.notes.get("drafted_by") == "retrieval" for r in records),
                "relaxed": sum(n.status == "relaxed" for r in records for n in r.nodes),
                "draft_ms": sum(r.timings_ms["draft"] for r in records),
                "forward_ms": sum(r.timings_ms["forward"] for r in records)})
        log(f"{item['id']}: " + "  ".join(f"{r['value']} {r['new_tokens'] / r['wall_s']:.1f} tok/s"
                                          for r in rows[-len(values) - 1:]))
    groups = {}
    for category in [*dict.fromkeys(r["category"] for r in rows), "ALL"]:
        picked = [r for r in rows if category in ("ALL", r["category"])]
        ar_tps = _sum(picked, BASELINE, "new_tokens") / _sum(picked, BASELINE, "wall_s")
        groups[category] = {}
        for value in [BASELINE, *values]:
            tokens, steps = _sum(picked, value, "new_tokens"), _sum(picked, value, "steps")
            tps = tokens / _sum(picked, value, "wall_s")
            groups[category][str(value)] = {
                "new_tokens": tokens, "steps": steps, "mat": round(tokens / steps, 3),
                "tokens_per_s": round(tps, 3), "speedup": round(tps / ar_tps, 3),
                "differing_fraction": round(_sum(picked, value, "differing") / tokens, 4),
                "trigger_rate": round(_sum(picked, value, "fired") / steps, 4),
                "retrieval_rate": round(_sum(picked, value, "retrieval_steps") / steps, 4),
                "relaxed": _sum(picked, value, "relaxed"),
                "draft_ms_per_step": round(_sum(picked, value, "draft_ms") / steps, 2),
                "forward_ms_per_step": round(_sum(picked, value, "forward_ms") / steps, 2)}
    return {"method": method, "vary": vary, "values": [str(v) for v in values], "fixed": fixed,
            "prompts": rows, "categories": groups}


def _sum(rows: list[dict], value, field: str):
    return sum(r[field] for r in rows if r["value"] == value)


def format_sweep(report: dict) -> str:
    header = (f"{'category':<14} {report['vary']:>10} {'MAT':>6} {'tok/s':>7} {'vs ar':>6} {'differ':>7} "
              f"{'trigger':>7} {'retr':>6} {'relaxed':>7} {'draft ms':>8} {'fwd ms':>7}")
    lines = [header]
    for category, per_value in report["categories"].items():
        for value, s in per_value.items():
            lines.append(f"{category:<14} {value:>10} {s['mat']:>6.2f} {s['tokens_per_s']:>7.2f} "
                         f"{s['speedup']:>5.2f}x {100 * s['differing_fraction']:>6.1f}% "
                         f"{100 * s['trigger_rate']:>6.1f}% {100 * s['retrieval_rate']:>5.1f}% {s['relaxed']:>7} "
                         f"{s['draft_ms_per_step']:>8.1f} {s['forward_ms_per_step']:>7.1f}")
    return "\n".join(lines)
