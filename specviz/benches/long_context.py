"""RAPID on long documents: the figures issue 11 asks for, measured on this machine.

- `grid`: ar and rapid (eta = 0) at each long-context item (2K-7K token documents) and retrieval budget,
  interleaved and repeated: acceptance rate, decode tokens/s (the RAG drafter's own prompt feed included,
  the target's prefill not) and the speedup, the shape of the paper's Figure 3;
- `eta`: rapid at temperature > 0 for each eta: acceptance rate and exact match of the answer against
  the item's reference (the reference, normalised, found in the output);
- `retrieval`: per question, whether the chosen chunks hold the evidence sentence (BM25 and MiniLM),
  the time of chunking + embedding + ranking, the embedder's load time and memory.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

from specviz.accept.sampling import SamplingSettings
from specviz.engine.run import RunResult, run_method
from specviz.studies.suite import SuiteItem
from specviz.index.chunk_retrieval import retrieve
from specviz.tree.budget import AUTO_BUDGET, Budget


def long_items(suite: list[SuiteItem]) -> list[SuiteItem]:
    return [item for item in suite if item.category == "long-context"]


def _normalise(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def exact_match(output: str, reference: str) -> bool:
    return _normalise(reference) in _normalise(output)


def _run(lm, method, item, params, sampling, max_new_tokens, draft=None) -> RunResult:
    return run_method(lm, method, item.messages, params=params, budget=AUTO_BUDGET if method == "ar" else Budget(64),
                      sampling=sampling, max_new_tokens=max_new_tokens, draft=draft)


def rapid_budget_rows(lm, items: list[SuiteItem], budgets=(512, 1024), repeats=3, max_new_tokens=48,
                      temperature=0.0, gamma=10, draft=None, log=print) -> list[dict]:
    """Per long-context item: a row for ar and one for rapid at each retrieval budget (interleaved, repeated)."""
    rows = []
    for item in items:
        configs = [("ar", {})] + [("rapid", {"retrieval_budget": b, "gamma": gamma}) for b in budgets]
        runs = {i: [] for i in range(len(configs))}
        for repeat in range(repeats):
            sampling = SamplingSettings(temperature, 1.0, repeat)
            for i, (method, params) in enumerate(configs):   # interleaved
                runs[i].append(_run(lm, method, item, params, sampling, max_new_tokens, draft))
        def steady(r):   # after the first step (which feeds the RAG drafter its own prompt)
            return (r.new_tokens - r.first_step_tokens) / max(1e-9, r.decode_s - r.first_step_s)
        ar_tps = statistics.median(r.new_tokens / r.decode_s for r in runs[0])
        ar_steady = statistics.median(steady(r) for r in runs[0])
        for i, (method, params) in enumerate(configs):
            group = runs[i]
            tps = statistics.median(r.new_tokens / r.decode_s for r in group)
            steady_tps = statistics.median(steady(r) for r in group)
            drafted = sum(r.drafted for r in group)
            context = len(group[0].prompt_ids)
            rows.append({"id": item.id, "context": context, "method": method,
                         "budget": params.get("retrieval_budget"), "decode_tokens_per_s": round(tps, 2),
                         "speedup": round(tps / ar_tps, 3), "steady_tokens_per_s": round(steady_tps, 2),
                         "steady_speedup": round(steady_tps / ar_steady, 3),
                         "ms_per_step": round(1000 * statistics.median(r.decode_s / r.steps for r in group), 1),
                         "acceptance_rate": round(sum(r.accepted_drafts for r in group) / drafted, 3) if drafted else None,
                         "mat": round(sum(r.new_tokens for r in group) / sum(r.steps for r in group), 2),
                         "lossless": all(r.output_ids == runs[0][k].output_ids for k, r in enumerate(group))
                         if temperature == 0 else None})
            log(f"{item.id} ({context} tok) {method} {params.get('retrieval_budget') or ''}: "
                f"{tps:.2f} tok/s, x{tps / ar_tps:.2f}, acc {rows[-1]['acceptance_rate']}")
    return rows


def run_eta(lm, items, etas=(0.0, 5.0, 10.0, 20.0), seeds=2, temperature=0.8, max_new_tokens=32, gamma=10,
            budget=1024, draft=None, log=print) -> list[dict]:
    rows = []
    for eta in etas:
        runs, matches = [], []
        for item in items:
            for seed in range(seeds):
                run = _run(lm, "rapid", item, {"eta": eta, "gamma": gamma, "retrieval_budget": budget},
                           SamplingSettings(temperature, 1.0, seed), max_new_tokens, draft)
                matches.append(exact_match(run.text, item.reference))
                runs.append(run)
        drafted = sum(r.drafted for r in runs)
        rows.append({"eta": eta, "runs": len(runs), "exact_match": round(sum(matches) / len(runs), 3),
                     "acceptance_rate": round(sum(r.accepted_drafts for r in runs) / drafted, 3) if drafted else None,
                     "mat": round(sum(r.new_tokens for r in runs) / sum(r.steps for r in runs), 2)})
        log(f"eta {eta:g}: exact match {rows[-1]['exact_match']:.2f}, acceptance {rows[-1]['acceptance_rate']}")
    return rows


def rss_mb() -> float:
    """This process's resident memory now (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_retrieval(lm, documents_dir: Path, chunk_tokens=512, budgets=(512, 1024)) -> dict:
    from specviz.index.embedder import shared_embedder

    rss_before = rss_mb()
    embedder = shared_embedder()
    embedder.embed(["warm-up: the weights are read in"])
    rss_after = rss_mb()
    rows = []
    for path in sorted(documents_dir.glob("*.md")):
        text = path.read_text()
        for q in json.loads(path.with_suffix(".questions.json").read_text()):
            for ranker in ("bm25", "minilm"):
                for budget in budgets:
                    started = time.perf_counter()
                    found = retrieve(lm.tokenizer, text, q["question"], chunk_tokens, budget, 0.3, ranker, embedder)
                    rows.append({"document": path.stem, "ranker": ranker, "budget": budget,
                                 "seconds": time.perf_counter() - started,
                                 "hit": any(q["evidence"] in found.chunks[i].text for i in found.chosen),
                                 "empty": not found.chosen})
    summary = {}
    for ranker in ("bm25", "minilm"):
        for budget in budgets:
            picked = [r for r in rows if r["ranker"] == ranker and r["budget"] == budget]
            summary[f"{ranker}@{budget}"] = {
                "questions": len(picked), "evidence_found": sum(r["hit"] for r in picked),
                "none_above_threshold": sum(r["empty"] for r in picked),
                "median_ms": round(1000 * statistics.median(r["seconds"] for r in picked), 1)}
    return {"embedder": embedder.name, "load_s": round(embedder.load_s, 3),
            "weights_mb": round(embedder.bytes / 2 ** 20, 1),
            "rss_growth_mb": round(rss_after - rss_before, 1), "rankers": summary}


def format_budget_rows(rows: list[dict]) -> str:
    lines = [f"{'item':<18} {'context':>7} {'method':<6} {'budget':>6} {'dec tok/s':>9} {'vs ar':>6} "
             f"{'steady':>7} {'vs ar':>6} {'ms/step':>7} {'acc':>5} {'MAT':>5} lossless"]
    for r in rows:
        acc = f"{100 * r['acceptance_rate']:.0f}%" if r["acceptance_rate"] is not None else "-"
        lossless = "-" if r["lossless"] is None else ("yes" if r["lossless"] else "NO")
        lines.append(f"{r['id']:<18} {r['context']:>7} {r['method']:<6} {r['budget'] or '':>6} "
                     f"{r['decode_tokens_per_s']:>9.2f} {r['speedup']:>5.2f}x {r['steady_tokens_per_s']:>7.2f} "
                     f"{r['steady_speedup']:>5.2f}x {r['ms_per_step']:>7.1f} {acc:>5} {r['mat']:>5.2f} {lossless}")
    return "\n".join(lines)
