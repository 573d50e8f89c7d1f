"""Benchmark: every method on every suite prompt, interleaved per prompt, against plain greedy `ar`."""

from __future__ import annotations

import statistics
from typing import Callable

from specviz.engine.divergence import classify, first_difference, recompute_margin, tie_threshold
from specviz.engine.session import Session
from specviz.errors import SpecvizError
from specviz.methods import METHODS, PEER_METHODS, get_method
from specviz.runtime.loading import LoadedModel
from specviz.runtime.prompts import PromptText, encode
from specviz.accept.sampling import SamplingSettings

BASELINE = "ar"


def check_methods(methods: list[str]) -> list[str]:
    for name in methods:
        if name not in METHODS and name not in PEER_METHODS:
            raise SpecvizError(f"Unknown method '{name}'; choose from {', '.join([*METHODS, *PEER_METHODS])}.")
    return [BASELINE] + [m for m in methods if m != BASELINE]  # speedups need the baseline


def params_for(method: str, params: dict) -> dict:
    """The subset of the shared --param values this method has (peers take none)."""
    if method in PEER_METHODS:
        return {}
    names = {p.name for p in get_method(method).params}
    return {k: v for k, v in params.items() if k in names}


def check_params(methods: list[str], params: dict) -> None:
    known = {p.name for m in methods if m in METHODS for p in get_method(m).params}
    unknown = sorted(set(params) - known)
    if unknown:
        raise SpecvizError(f"No method in {methods} has parameter(s) {unknown}.")


WARMUP_STEPS = 8  # past a measured choice's first tries (two steps of each of its two kinds)


def warm_up(lm: LoadedModel, method: str, prompt_ids: list[int], params: dict, budget="auto",
            draft: LoadedModel | None = None, sampling: SamplingSettings = SamplingSettings(),
            prompt: PromptText | None = None) -> None:
    """An untimed short run, so that first-call costs land on no prompt: kernels, the datastore, the warm
    copy-logit table, and the first tries of a measured choice (unified's draft model stage, ReSpec's
    fallback), which the process's later sessions of the same setting share."""
    if method in PEER_METHODS:
        run_once(lm, method, prompt_ids, 8, params, budget, draft, sampling, prompt)
        return
    session = _started_session(lm, method, prompt_ids, params, budget, draft, sampling, prompt)
    while not session.finished and len(session.records) < WARMUP_STEPS:
        session.step()


def _started_session(lm: LoadedModel, method: str, prompt_ids: list[int], params: dict, budget,
                     draft: LoadedModel | None, sampling: SamplingSettings, prompt: PromptText | None) -> Session:
    """A session of one of our methods with the shared settings, prefilled with the prompt."""
    own_draft = draft if get_method(method).uses_draft_model else None
    session = Session(lm, method, params_for(method, params), budget=budget, draft=own_draft,
                      temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.seed)
    return session.start_ids(prompt_ids, prompt)


def run_once(lm: LoadedModel, method: str, prompt_ids: list[int], max_new_tokens: int, params: dict,
             budget="auto", draft: LoadedModel | None = None, sampling: SamplingSettings = SamplingSettings(),
             prompt: PromptText | None = None) -> dict:
    """One generation; returns output ids, new tokens, steps, wall seconds (prefill included), decode
    seconds, drafted and accepted draft tokens."""
    if method in PEER_METHODS:
        if not sampling.greedy:
            raise SpecvizError(f"{method} runs greedy only here; leave it out of a sampled benchmark.")
        from specviz.tools.peers import hf_generate
        return hf_generate(lm, prompt_ids, method, max_new_tokens, draft)
    session = _started_session(lm, method, prompt_ids, params, budget, draft, sampling, prompt)
    session.run(max_new_tokens)
    stats = session.stats()
    # the planner's predicted accepted drafts against the measured ones, step by step
    errors = [abs(r.plan.predicted_accepted - r.num_accepted_drafts) for r in session.records
              if r.plan is not None]
    return {"output_ids": session.output_ids, "margins": session.margins, "lossless_declared": session.lossless,
            "new_tokens": stats["new_tokens"], "steps": stats["steps"],
            "wall_s": stats["wall_s"], "decode_s": session.step_s, "predicted_abs_error": sum(errors),
            "drafted": sum(len(r.nodes) - 1 for r in session.records),
            "first_step_s": session.records[0].timings_ms["total"] / 1000 if session.records else 0.0,
            "first_step_tokens": len(session.records[0].accepted_tokens) if session.records else 0,
            "accepted_drafts": sum(r.num_accepted_drafts for r in session.records),
            "model_drafted": sum(bool(r.allocation.get("model")) for r in session.records),
            "empty_trees": sum(len(r.nodes) == 1 for r in session.records)}


def compare(lm: LoadedModel, prompt_ids: list[int], reference: dict, run: dict, sampled: bool = False) -> str:
    """yes / tie@k / MISMATCH / lossy@k of one run against ar's (see engine.divergence); 'sampled' when the
    runs sample (their tokens differ by design: losslessness is a property of distributions there)."""
    if sampled:
        return "sampled"
    if run["output_ids"] == reference["output_ids"]:
        return "yes"
    k = first_difference(reference["output_ids"], run["output_ids"])
    margins = run.get("margins")
    if margins is None and k < len(run["output_ids"]):  # a peer: recompute the margin it chose by
        margins = {k: recompute_margin(lm, prompt_ids, run["output_ids"], k)}
    return classify(reference["output_ids"], reference["margins"], run["output_ids"], margins or {},
                    tie_threshold(lm.dtype), run.get("lossless_declared", True)).verdict


def worst_verdict(verdicts: list[str]) -> str:
    """Over runs or prompts: MISMATCH beats lossy beats tie beats yes; ties and lossy keep their count."""
    if verdicts and all(v == "sampled" for v in verdicts):
        return "sampled"
    for kind in ("MISMATCH", "lossy", "tie"):
        hits = [v for v in verdicts if v.startswith(kind)]
        if hits:
            return hits[0] if len(hits) == 1 or kind == "MISMATCH" else f"{kind}x{len(hits)}"
    return "yes"


def run_bench(lm: LoadedModel, suite: list[dict], methods: list[str], max_new_tokens: int = 128,
              params: dict | None = None, budget="auto", repeats: int = 1, draft: LoadedModel | None = None,
              log: Callable[[str], None] = lambda s: None, sampling: SamplingSettings = SamplingSettings()) -> dict:
    methods = check_methods(methods)
    params = params or {}
    check_params(methods, params)
    encoded = [(item, encode(lm.tokenizer, item["messages"], lm.max_context)) for item in suite]
    for method in methods:
        warm_up(lm, method, encoded[0][1], params, budget, draft, sampling, PromptText.of(suite[0]["messages"]))
    from specviz.index.datastore import shared_datastore
    from specviz.tools.self_repetition import self_repetition

    try:
        datastore = shared_datastore(lm)
    except SpecvizError as error:
        datastore = None
        log(f"self-repetition with the datastore not measured: {error}")
    rows = []
    for item, prompt_ids in encoded:
        limit = int(item.get("max_new_tokens", max_new_tokens))
        runs = {m: [] for m in methods}
        prompt = PromptText.of(item["messages"])
        for repeat in range(repeats):
            for method in methods:  # interleaved: A B C A B C ...
                seeded = SamplingSettings(sampling.temperature, sampling.top_p, sampling.seed + repeat)
                runs[method].append(run_once(lm, method, prompt_ids, limit, params, budget, draft, seeded, prompt))
        reference = runs[BASELINE][0]
        repetition = (round(self_repetition(prompt_ids, reference["output_ids"]), 3),
                      round(self_repetition(prompt_ids, reference["output_ids"], datastore), 3) if datastore else None)
        for method in methods:
            first = runs[method][0]
            wall_s = statistics.median(r["wall_s"] for r in runs[method])
            rows.append({"id": item["id"], "category": item["category"], "method": method,
                         "new_tokens": first["new_tokens"], "steps": first["steps"], "wall_s": wall_s,
                         "lossless": all(r["output_ids"] == reference["output_ids"] for r in runs[method]),
                         "verdict": worst_verdict([compare(lm, prompt_ids, reference, r, not sampling.greedy)
                                                   for r in runs[method]]),
                         "decode_s": statistics.median(r.get("decode_s", r["wall_s"]) for r in runs[method]),
                         "drafted": first.get("drafted", 0), "accepted_drafts": first.get("accepted_drafts", 0),
                         "self_repetition": repetition[0], "self_repetition_ds": repetition[1],
                         **{k: first[k] for k in ("predicted_abs_error", "model_drafted", "empty_trees")
                            if k in first}})
        log(f"{item['id']}: " + "  ".join(
            f"{r['method']} {r['new_tokens'] / r['wall_s']:.1f} tok/s" for r in rows[-len(methods):]))
    return summarise(rows, methods)


def _aggregate(rows: list[dict]) -> dict:
    tokens = sum(r["new_tokens"] for r in rows)
    steps = sum(r["steps"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    with_ds = [r["self_repetition_ds"] for r in rows if r.get("self_repetition_ds") is not None]
    out = {"prompts": len(rows), "new_tokens": tokens, "steps": steps,
           "mat": round(tokens / steps, 3) if steps else 0.0, "wall_s": round(wall, 3),
           "tokens_per_s": round(tokens / wall, 3) if wall else 0.0,
           "decode_tokens_per_s": round(tokens / sum(r["decode_s"] for r in rows), 3) if rows else 0.0,
           "acceptance_rate": round(sum(r["accepted_drafts"] for r in rows) / drafted, 3)
           if (drafted := sum(r["drafted"] for r in rows)) else None,
           "lossless": all(r["lossless"] for r in rows),
           "verdict": worst_verdict([r["verdict"] for r in rows]),
           "self_repetition": round(statistics.mean(r["self_repetition"] for r in rows), 3),
           "self_repetition_ds": round(statistics.mean(with_ds), 3) if with_ds else None}
    if all("predicted_abs_error" in r for r in rows) and steps:
        out["predicted_mae"] = round(sum(r["predicted_abs_error"] for r in rows) / steps, 3)
        out["model_steps"] = round(sum(r["model_drafted"] for r in rows) / steps, 3)
        out["empty_tree_steps"] = round(sum(r["empty_trees"] for r in rows) / steps, 3)
    return out


def summarise(rows: list[dict], methods: list[str]) -> dict:
    """Per prompt, per category and overall figures; speedups are against `ar` on the same prompts."""
    baseline_tps = {r["id"]: r["new_tokens"] / r["wall_s"] for r in rows if r["method"] == BASELINE}
    for r in rows:
        r["mat"] = round(r["new_tokens"] / r["steps"], 3) if r["steps"] else 0.0
        r["tokens_per_s"] = round(r["new_tokens"] / r["wall_s"], 3)
        r["speedup"] = round(r["tokens_per_s"] / baseline_tps[r["id"]], 3)
    groups = {}
    for category in dict.fromkeys(r["category"] for r in rows):
        groups[category] = {m: _aggregate([r for r in rows if r["category"] == category and r["method"] == m])
                            for m in methods}
    groups["ALL"] = {m: _aggregate([r for r in rows if r["method"] == m]) for m in methods}
    for per_method in groups.values():
        for m in methods:
            per_method[m]["speedup"] = round(per_method[m]["tokens_per_s"] / per_method[BASELINE]["tokens_per_s"], 3)
    return {"methods": methods, "prompts": rows, "categories": groups}


PEER_REFERENCE = "hf-pld"  # the peer every table also compares against, when it ran


def format_table(report: dict) -> str:
    """One line per category and method: tokens, steps, MAT, tokens/s, speedup vs ar (and vs hf-pld when
    it ran), lossless."""
    peer = PEER_REFERENCE if PEER_REFERENCE in report["methods"] else None
    header = f"{'category':<14} {'method':<18} {'tokens':>6} {'steps':>6} {'MAT':>6} {'tok/s':>7} {'vs ar':>6}"
    lines = [header + (f" {'vs ' + peer:>9}" if peer else "") + " lossless selfrep  +DS  predMAE empty  acc"]
    for category, per_method in report["categories"].items():
        for method, s in per_method.items():
            line = (f"{category:<14} {method:<18} {s['new_tokens']:>6} {s['steps']:>6} {s['mat']:>6.2f} "
                    f"{s['tokens_per_s']:>7.2f} {s['speedup']:>5.2f}x")
            if peer:
                line += f" {s['tokens_per_s'] / per_method[peer]['tokens_per_s']:>8.2f}x"
            ds = f"{s['self_repetition_ds']:.2f}" if s.get("self_repetition_ds") is not None else "-"
            mae = f"{s['predicted_mae']:.2f}" if "predicted_mae" in s else "-"
            empty = f"{100 * s['empty_tree_steps']:.0f}%" if "empty_tree_steps" in s else "-"
            acc = f"{100 * s['acceptance_rate']:.0f}%" if s.get("acceptance_rate") is not None else "-"
            lines.append(line + f" {s['verdict']:>8} {s['self_repetition']:>7.2f} {ds:>5} "
                                f"{mae:>7} {empty:>5} {acc:>4}")
    return "\n".join(lines)
