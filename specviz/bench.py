"""Benchmark: every method on every suite prompt, interleaved per prompt, against plain greedy `ar`."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Callable

from specviz.engine import Session
from specviz.errors import SpecvizError
from specviz.methods import METHODS, PEER_METHODS, get_method
from specviz.models import LoadedModel
from specviz.prompts import as_messages, encode, validate_messages

BASELINE = "ar"


def load_suite(path: str | Path) -> list[dict]:
    """Lines of {"id", "category", "messages" | "prompt", optional "max_new_tokens"}."""
    path = Path(path)
    if not path.is_file():
        raise SpecvizError(f"Suite file '{path}' does not exist.")
    suite = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecvizError(f"{path}:{number} is not valid JSON: {exc}") from exc
        if not isinstance(item, dict) or not {"id", "category"} <= item.keys():
            raise SpecvizError(f"{path}:{number} needs an \"id\" and a \"category\".")
        if "messages" in item:
            item["messages"] = validate_messages(item["messages"])
        elif "prompt" in item:
            item["messages"] = as_messages(item["prompt"])
        else:
            raise SpecvizError(f"{path}:{number} needs \"messages\" or \"prompt\".")
        suite.append(item)
    if not suite:
        raise SpecvizError(f"Suite file '{path}' holds no prompts.")
    return suite


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


def run_once(lm: LoadedModel, method: str, prompt_ids: list[int], max_new_tokens: int, params: dict,
             budget="auto", draft: LoadedModel | None = None) -> dict:
    """One generation; returns output ids, new tokens, steps, wall seconds."""
    if method in PEER_METHODS:
        from specviz.peers import hf_generate
        return hf_generate(lm, prompt_ids, method, max_new_tokens, draft)
    own_draft = draft if get_method(method).uses_draft_model else None
    session = Session(lm, method, params_for(method, params), budget=budget, draft=own_draft).start_ids(prompt_ids)
    session.run(max_new_tokens)
    stats = session.stats()
    return {"output_ids": session.output_ids, "new_tokens": stats["new_tokens"], "steps": stats["steps"],
            "wall_s": stats["wall_s"]}


def run_bench(lm: LoadedModel, suite: list[dict], methods: list[str], max_new_tokens: int = 128,
              params: dict | None = None, budget="auto", repeats: int = 1, draft: LoadedModel | None = None,
              log: Callable[[str], None] = lambda s: None) -> dict:
    methods = check_methods(methods)
    params = params or {}
    check_params(methods, params)
    encoded = [(item, encode(lm.tokenizer, item["messages"], lm.max_context)) for item in suite]
    # one untimed warm-up of every method, so first-call costs land on no prompt
    for method in methods:
        run_once(lm, method, encoded[0][1], 8, params, budget, draft)
    rows = []
    for item, prompt_ids in encoded:
        limit = int(item.get("max_new_tokens", max_new_tokens))
        runs = {m: [] for m in methods}
        for _ in range(repeats):
            for method in methods:  # interleaved: A B C A B C ...
                runs[method].append(run_once(lm, method, prompt_ids, limit, params, budget, draft))
        reference = runs[BASELINE][0]["output_ids"]
        for method in methods:
            first = runs[method][0]
            wall_s = statistics.median(r["wall_s"] for r in runs[method])
            rows.append({"id": item["id"], "category": item["category"], "method": method,
                         "new_tokens": first["new_tokens"], "steps": first["steps"], "wall_s": wall_s,
                         "lossless": all(r["output_ids"] == reference for r in runs[method])})
        log(f"{item['id']}: " + "  ".join(
            f"{r['method']} {r['new_tokens'] / r['wall_s']:.1f} tok/s" for r in rows[-len(methods):]))
    return summarise(rows, methods)


def _aggregate(rows: list[dict]) -> dict:
    tokens = sum(r["new_tokens"] for r in rows)
    steps = sum(r["steps"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    return {"prompts": len(rows), "new_tokens": tokens, "steps": steps,
            "mat": round(tokens / steps, 3) if steps else 0.0, "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 3) if wall else 0.0,
            "lossless": all(r["lossless"] for r in rows)}


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
    lines = [header + (f" {'vs ' + peer:>9}" if peer else "") + " lossless"]
    for category, per_method in report["categories"].items():
        for method, s in per_method.items():
            line = (f"{category:<14} {method:<18} {s['new_tokens']:>6} {s['steps']:>6} {s['mat']:>6.2f} "
                    f"{s['tokens_per_s']:>7.2f} {s['speedup']:>5.2f}x")
            if peer:
                line += f" {s['tokens_per_s'] / per_method[peer]['tokens_per_s']:>8.2f}x"
            lines.append(line + f" {'yes' if s['lossless'] else 'NO'}")
    return "\n".join(lines)


def step_overhead(lm: LoadedModel, suite: list[dict], method: str, budget, max_new_tokens: int,
                  params: dict | None = None) -> dict:
    """Median milliseconds per step spent outside the target's forward pass (drafting, union, mask,
    acceptance, cache compaction, drafter updates, the step record), over every step of every prompt."""
    parts: dict[str, list[float]] = {"outside_forward": [], "draft": [], "verify_minus_forward": [], "update": [],
                                     "forward": [], "tree_nodes": []}
    for item in suite:
        session = Session(lm, method, params, budget=budget).start(item["messages"])
        session.run(max_new_tokens)
        for record in session.records:
            t = record.timings_ms
            parts["outside_forward"].append(t["total"] - t["forward"])
            parts["draft"].append(t["draft"])
            parts["verify_minus_forward"].append(t["verify"] - t["forward"])
            parts["update"].append(t["update"])
            parts["forward"].append(t["forward"])
            parts["tree_nodes"].append(len(record.nodes) - 1)
    # the same figure over the steps whose tree (nearly) filled the budget: the cost of a full tree
    full = [o for o, n in zip(parts["outside_forward"], parts["tree_nodes"])
            if isinstance(budget, int) and n >= 0.9 * budget]
    return {"method": method, "budget": budget, "steps": len(parts["draft"]),
            **{f"median_{k}": round(statistics.median(v), 3) for k, v in parts.items()},
            "max_tree_nodes": max(parts["tree_nodes"]), "full_tree_steps": len(full),
            "median_outside_forward_full_tree": round(statistics.median(full), 3) if full else None}


def automaton_memory(lm: LoadedModel, suite: list[dict], generated_tokens: int, params: dict | None = None,
                     per_prompt: int = 256) -> dict:
    """RACER's automaton after `generated_tokens` tokens of real output: racer generates on the suite's
    prompts in turn (up to per_prompt tokens each) until that many tokens exist; one automaton with
    racer's settings is then fed every prompt and output in order, as a long session's drafter would be.
    Its size is reported as nodes, the tables' own count (memory_bytes) and what tracemalloc saw it
    allocate."""
    import gc
    import tracemalloc

    from specviz.automaton import NgramAutomaton

    own = params_for("racer", params or {})
    values = get_method("racer").resolve_params(own)
    streams, generated = [], 0
    while generated < generated_tokens:
        for item in suite:
            session = Session(lm, "racer", own).start(item["messages"])
            session.run(min(per_prompt, generated_tokens - generated))
            streams.append(session.context)
            generated += len(session.output_ids)
            if generated >= generated_tokens:
                break
    gc.collect()
    tracemalloc.start()
    automaton = NgramAutomaton(values["ngram_length"], values["capacity"])
    for stream in streams:
        automaton.feed(stream)
    automaton.build_failure_links()
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"generated_tokens": generated, "stream_tokens": sum(len(s) for s in streams),
            "ngram_length": values["ngram_length"], "capacity": values["capacity"], "nodes": len(automaton),
            "evicted": automaton.evicted, "table_bytes": automaton.memory_bytes(), "traced_bytes": traced}


def run_sweep(lm: LoadedModel, suite: list[dict], method: str, vary: str, values: list, max_new_tokens: int = 96,
              params: dict | None = None, budget="auto", draft: LoadedModel | None = None,
              log: Callable[[str], None] = lambda s: None) -> dict:
    """One method at several values of one parameter, interleaved per prompt after plain greedy `ar`:
    per category and value, MAT, tokens/s, speedup vs ar, the fraction of output tokens that differ
    from ar's (lossless) output, how often the entropy trigger fired and retrieval drafted, relaxed
    acceptances, and the mean draft / verify-forward milliseconds per step."""
    from specviz.token_diff import token_diff

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
