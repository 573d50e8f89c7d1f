"""Totals over a group of runs (one method's in a bench category, one sweep point's): the one aggregation
behind bench's and sweep's tables. Rows are the tools' per-run (or per-prompt median) dicts; every group
gets tokens, steps, MAT, wall time, tokens/s, the speedup against its baseline's rows on the same prompts
and the worst verdict, and the figures its rows measured besides (bench: decode speed, acceptance,
losslessness, self-repetition, the planner's error; sweep: the difference from greedy ar, trigger and
retrieval rates, per-step draft and forward time)."""

from __future__ import annotations

import statistics


def worst_verdict(verdicts: list[str]) -> str:
    """Over runs or prompts: MISMATCH beats lossy beats tie beats yes; ties and lossy keep their count."""
    if verdicts and all(v == "sampled" for v in verdicts):
        return "sampled"
    for kind in ("MISMATCH", "lossy", "tie"):
        hits = [v for v in verdicts if v.startswith(kind)]
        if hits:
            return hits[0] if len(hits) == 1 or kind == "MISMATCH" else f"{kind}x{len(hits)}"
    return "yes"


def by_category(rows: list[dict]) -> dict[str, list[dict]]:
    """The rows of each category (in the order they first appear), then "ALL": every row."""
    groups = {category: [r for r in rows if r["category"] == category]
              for category in dict.fromkeys(r["category"] for r in rows)}
    groups["ALL"] = list(rows)
    return groups


def _measured(rows: list[dict], key: str) -> bool:
    return bool(rows) and all(key in r for r in rows)


def totals(rows: list[dict], baseline_rows: list[dict], count: str = "runs") -> dict:
    """Totals over rows; speedup: their tokens / wall seconds against the baseline rows' (the same prompts).
    count: the name the number of rows goes under (bench counts prompts, sweep runs)."""
    tokens, steps = sum(r["new_tokens"] for r in rows), sum(r["steps"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    tps = tokens / wall if wall else 0.0
    base_wall = sum(r["wall_s"] for r in baseline_rows)
    base_tps = sum(r["new_tokens"] for r in baseline_rows) / base_wall if base_wall else 0.0
    out = {count: len(rows), "new_tokens": tokens, "steps": steps,
           "mat": round(tokens / steps, 3) if steps else 0.0, "wall_s": round(wall, 4),
           "tokens_per_s": round(tps, 3), "speedup": round(tps / base_tps, 3) if base_tps else 0.0}
    if _measured(rows, "decode_s"):
        decode = sum(r["decode_s"] for r in rows)
        out["decode_tokens_per_s"] = round(tokens / decode, 3) if decode else 0.0
    if _measured(rows, "drafted"):
        drafted = sum(r["drafted"] for r in rows)
        out["acceptance_rate"] = round(sum(r["accepted_drafts"] for r in rows) / drafted, 3) if drafted else None
    if _measured(rows, "differing"):
        out["differing_fraction"] = round(sum(r["differing"] for r in rows) / tokens, 4) if tokens else 0.0
        out["identical"] = sum(r["first_difference"] is None for r in rows)
    if _measured(rows, "lossless"):
        out["lossless"] = all(r["lossless"] for r in rows)
    out["verdict"] = worst_verdict([r["verdict"] for r in rows])
    if _measured(rows, "self_repetition"):
        with_ds = [r["self_repetition_ds"] for r in rows if r.get("self_repetition_ds") is not None]
        out["self_repetition"] = round(statistics.mean(r["self_repetition"] for r in rows), 3)
        out["self_repetition_ds"] = round(statistics.mean(with_ds), 3) if with_ds else None
    if _measured(rows, "predicted_abs_error") and steps:
        out["predicted_mae"] = round(sum(r["predicted_abs_error"] for r in rows) / steps, 3)
        if _measured(rows, "predicted_spread"):
            out["predicted_spread"] = round(sum(r["predicted_spread"] for r in rows) / steps, 3)
        out["model_steps"] = round(sum(r["model_drafted"] for r in rows) / steps, 3)
        out["empty_tree_steps"] = round(sum(r["empty_trees"] for r in rows) / steps, 3)
    if _measured(rows, "fired"):
        def per_step(key: str, digits: int) -> float:
            return round(sum(r[key] for r in rows) / steps, digits) if steps else 0.0

        out.update({"trigger_rate": per_step("fired", 4), "retrieval_rate": per_step("retrieval_steps", 4),
                    "relaxed": sum(r["relaxed"] for r in rows), "draft_ms_per_step": per_step("draft_ms", 2),
                    "forward_ms_per_step": per_step("forward_ms", 2)})
    return out
