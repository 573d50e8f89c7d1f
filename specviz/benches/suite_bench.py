"""Benchmark: every method on every suite prompt, interleaved per prompt, against plain greedy `ar`."""

from __future__ import annotations

import functools
import statistics
from typing import Callable

from specviz.engine.divergence import classify, first_difference, recompute_margin, tie_threshold
from specviz.engine.prediction import PredictionError
from specviz.studies.peers import PEER_METHODS, peer_run
from specviz.engine.run import RunResult, run_method, warm_up
from specviz.studies.suite import SuiteItem
from specviz.errors import SpecvizError
from specviz.methods import METHODS, get_method
from specviz.tree.budget import AUTO_BUDGET, Budget
from specviz.runtime.loading import LoadedModel
from specviz.runtime.prompts import PromptText, encode
from specviz.accept.sampling import SamplingSettings
from specviz.studies.totals import by_category, totals, worst_verdict

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


def planner_figures(run: RunResult) -> dict:
    """Per run of one of our methods: how far the planner's predicted accepted drafts were from the measured
    ones (summed over steps), the steps that ran the draft model and the steps with an empty tree."""
    # the planner's predicted accepted drafts against the measured ones, step by step
    error = PredictionError.of(run.records)
    # summed over the planned steps, with the error the planner's own chances expect (engine.prediction) beside it
    errors, spread = (error.mae * error.steps, error.spread * error.steps) if error is not None else (0.0, 0.0)
    return {"predicted_abs_error": errors, "predicted_spread": spread,
            "model_drafted": sum(bool(r.allocation.get("model")) for r in run.records),
            "empty_trees": sum(len(r.nodes) == 1 for r in run.records)}


def compare(lm: LoadedModel, prompt_ids: list[int], reference: RunResult, run: RunResult,
            sampled: bool = False) -> str:
    """yes / tie@k / MISMATCH / lossy@k of one run against ar's (see engine.divergence); 'sampled' when the
    runs sample (their tokens differ by design: losslessness is a property of distributions there)."""
    if sampled:
        return "sampled"
    if run.output_ids == reference.output_ids:
        return "yes"
    k = first_difference(reference.output_ids, run.output_ids)
    margins = run.margins
    if margins is None and k < len(run.output_ids):  # a peer: recompute the margin it chose by
        margins = {k: recompute_margin(lm, prompt_ids, run.output_ids, k)}
    return classify(reference.output_ids, reference.margins, run.output_ids, margins or {},
                    tie_threshold(lm.dtype), run.lossless_declared).verdict


def run_bench(lm: LoadedModel, suite: list[SuiteItem], methods: list[str], max_new_tokens: int = 128,
              params: dict | None = None, budget: Budget | int | str = AUTO_BUDGET, repeats: int = 1,
              draft: LoadedModel | None = None,
              log: Callable[[str], None] = lambda s: None, sampling: SamplingSettings = SamplingSettings(),
              regimes: list[str] | None = None, warm: bool = True,
              peers: dict[str, Callable[[list[int], int], RunResult]] | None = None) -> dict:
    """regimes: CUDA graphs 'on' and 'off' (runtime.captured_forward.install) taking turns within every repeat of
    every prompt, each with its own `ar`; the report then holds one summary per regime under 'regimes'. budget: a
    Budget, or its text form (the CLI's "auto" or number of nodes). peers: other engines by name (runner(prompt ids,
    token limit) -> RunResult: benches.llamacpp's), run after our methods on every prompt and repeat, greedy."""
    budget = Budget.parse(budget)
    if regimes:
        return _run_regimes(lm, suite, methods, max_new_tokens, params, budget, repeats, draft, log, sampling, regimes)
    methods = check_methods(methods)
    params = params or {}
    peers = peers or {}
    if peers and not sampling.greedy:
        raise SpecvizError("The other engines run greedy here: leave --temperature at 0 with --peer.")
    check_params(methods, params)
    encoded = [(item, encode(lm.tokenizer, item.messages, lm.max_context)) for item in suite]
    for method in methods if warm else ():
        if method in PEER_METHODS:
            peer_run(lm, method, prompt_ids=encoded[0][1], max_new_tokens=8, draft=draft)
        else:
            warm_up(lm, method, PromptText.of(suite[0].messages), prompt_ids=encoded[0][1],
                    params=params_for(method, params), budget=budget, sampling=sampling, draft=draft)
    for runner in peers.values() if warm else ():
        runner(encoded[0][1], 8)  # its first answer's one-time costs out of the timings
    from specviz.index.datastore import shared_datastore
    from specviz.studies.self_repetition import self_repetition

    try:
        datastore = shared_datastore(lm)
    except SpecvizError as error:
        datastore = None
        log(f"self-repetition with the datastore not measured: {error}")
    rows = []
    for item, prompt_ids in encoded:
        limit = item.limit(max_new_tokens)
        runs: dict[str, list[RunResult]] = {m: [] for m in [*methods, *peers]}
        prompt = PromptText.of(item.messages)
        for repeat in range(repeats):
            for method in methods:  # interleaved: A B C A B C ...
                seeded = SamplingSettings(sampling.temperature, sampling.top_p, sampling.seed + repeat)
                run = peer_run if method in PEER_METHODS else functools.partial(run_method, budget=budget)
                runs[method].append(run(lm, method, prompt, prompt_ids=prompt_ids, params=params_for(method, params),
                                        sampling=seeded, max_new_tokens=limit, draft=draft))
            for name, runner in peers.items():
                runs[name].append(runner(prompt_ids, limit))
        reference = runs[BASELINE][0]
        repetition = (round(self_repetition(prompt_ids, reference.output_ids), 3),
                      round(self_repetition(prompt_ids, reference.output_ids, datastore), 3) if datastore else None)
        for method in runs:
            first = runs[method][0]
            rows.append({"id": item.id, "category": item.category, "method": method,
                         "new_tokens": first.new_tokens, "steps": first.steps,
                         "wall_s": statistics.median(r.wall_s for r in runs[method]),
                         "lossless": all(r.output_ids == reference.output_ids for r in runs[method]),
                         "verdict": worst_verdict([compare(lm, prompt_ids, reference, r, not sampling.greedy)
                                                   for r in runs[method]]),
                         "decode_s": statistics.median(r.decode_s for r in runs[method]),
                         "drafted": first.drafted, "accepted_drafts": first.accepted_drafts,
                         "self_repetition": repetition[0], "self_repetition_ds": repetition[1],
                         "first_difference": first_difference(reference.output_ids, first.output_ids),
                         **(planner_figures(first) if first.records is not None else {})})
        log(f"{item.id}: " + "  ".join(
            f"{r['method']} {r['new_tokens'] / r['wall_s']:.1f} tok/s" for r in rows[-len(runs):]))
    return summarise(rows, [*methods, *peers])


def _run_regimes(lm, suite, methods, max_new_tokens, params, budget, repeats, draft, log, sampling,
                 regimes: list[str]) -> dict:
    """run_bench once per prompt and repeat in each regime, the regimes interleaved (on, off, on, off ...)."""
    from specviz.runtime import captured_forward

    reports: dict[str, list[dict]] = {regime: [] for regime in regimes}
    for regime in regimes:  # each regime's first runs (graph captures, kernels' set-up) outside the timings
        captured_forward.install(lm, regime)
        run_bench(lm, suite[:1], methods, min(max_new_tokens, 16), params, budget, 1, draft, sampling=sampling)
    for item in suite:
        for repeat in range(repeats):
            for regime in regimes:
                captured_forward.install(lm, regime)
                seeded = SamplingSettings(sampling.temperature, sampling.top_p, sampling.seed + repeat)
                report = run_bench(lm, [item], methods, max_new_tokens, params, budget, 1, draft,
                                   lambda line, regime=regime: log(f"[graphs {regime}] {line}"), seeded, warm=False)
                reports[regime].append(report)
    captured_forward.install(lm, regimes[0])
    merged = {}
    for regime, parts in reports.items():
        rows = []
        for item in suite:  # the median wall time of each prompt's repeats, as run_bench takes it
            mine = [r for part in parts for r in part["prompts"] if r["id"] == item.id]
            for method in methods:
                runs = [r for r in mine if r["method"] == method]
                row = dict(runs[0])
                row["wall_s"] = statistics.median(r["wall_s"] for r in runs)
                row["decode_s"] = statistics.median(r["decode_s"] for r in runs)
                row["lossless"] = all(r["lossless"] for r in runs)
                rows.append(row)
        merged[regime] = summarise(rows, methods)
    return {"regimes": merged}


def summarise(rows: list[dict], methods: list[str]) -> dict:
    """Per prompt, per category and overall figures; speedups are against `ar` on the same prompts."""
    baseline_tps = {r["id"]: r["new_tokens"] / r["wall_s"] for r in rows if r["method"] == BASELINE}
    for r in rows:
        r["mat"] = round(r["new_tokens"] / r["steps"], 3) if r["steps"] else 0.0
        r["tokens_per_s"] = round(r["new_tokens"] / r["wall_s"], 3)
        r["speedup"] = round(r["tokens_per_s"] / baseline_tps[r["id"]], 3)
    groups = {}
    for category, picked in by_category(rows).items():
        baseline = [r for r in picked if r["method"] == BASELINE]
        groups[category] = {m: totals([r for r in picked if r["method"] == m], baseline, count="prompts")
                            for m in methods}
    return {"methods": methods, "prompts": rows, "categories": groups}


PEER_REFERENCE = "hf-pld"  # the peer every table also compares against, when it ran


def format_table(report: dict) -> str:
    """One line per category and method: tokens, steps, MAT, tokens/s end to end and generation only (gen/s: the
    steps alone, no prefill), speedup vs ar (and vs hf-pld when it ran), lossless."""
    peer = PEER_REFERENCE if PEER_REFERENCE in report["methods"] else None
    header = (f"{'category':<14} {'method':<22} {'tokens':>6} {'steps':>6} {'MAT':>6} {'tok/s':>7} {'gen/s':>7} "
              f"{'vs ar':>6}")
    lines = [header + (f" {'vs ' + peer:>9}" if peer else "") + " lossless selfrep  +DS  predMAE spread empty  acc"]
    for category, per_method in report["categories"].items():
        for method, s in per_method.items():
            line = (f"{category:<14} {method:<22} {s['new_tokens']:>6} {s['steps']:>6} {s['mat']:>6.2f} "
                    f"{s['tokens_per_s']:>7.2f} {s.get('decode_tokens_per_s', 0.0):>7.2f} {s['speedup']:>5.2f}x")
            if peer:
                line += f" {s['tokens_per_s'] / per_method[peer]['tokens_per_s']:>8.2f}x"
            ds = f"{s['self_repetition_ds']:.2f}" if s.get("self_repetition_ds") is not None else "-"
            mae = f"{s['predicted_mae']:.2f}" if "predicted_mae" in s else "-"
            spread = f"{s['predicted_spread']:.2f}" if "predicted_spread" in s else "-"
            empty = f"{100 * s['empty_tree_steps']:.0f}%" if "empty_tree_steps" in s else "-"
            acc = f"{100 * s['acceptance_rate']:.0f}%" if s.get("acceptance_rate") is not None else "-"
            lines.append(line + f" {s['verdict']:>8} {s['self_repetition']:>7.2f} {ds:>5} "
                                f"{mae:>7} {spread:>6} {empty:>5} {acc:>4}")
    return "\n".join(lines)
