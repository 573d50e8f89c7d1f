"""`python -m specviz dev space-figures`: the figures behind public mode's limits (lab/public_policy.py), measured
here: the process memory one loaded model takes (and what that projects to for the SmolLM2 family by parameter
count), plain decoding's speed (what a Run of the new-token limit holds a queue place for), a traced run's size at
the largest fixed budget a visitor can ask for (the upload limit), one sweep run's time (the sweep limit);
benches/memory_budget.py adds public mode's memory budget."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

# parameter counts of the SmolLM2 Instruct models (their model cards)
FAMILY = {"HuggingFaceTB/SmolLM2-135M-Instruct": 134.5e6, "HuggingFaceTB/SmolLM2-360M-Instruct": 361.8e6,
          "HuggingFaceTB/SmolLM2-1.7B-Instruct": 1711.4e6}
PROMPT = ("Write a detailed guide to keeping a small vegetable garden through the year: soil, sowing, watering, "
          "pests and harvest, with one section per season.")


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure_space_figures(new_tokens: int = 512, sweep_tokens: int = 64) -> dict:
    from specviz.engine.run import run_method
    from specviz.tree.budget import Budget
    from specviz.records.trace import Trace
    from specviz.runtime.shared_resources import shared_model

    before = rss_bytes()
    lm = shared_model(None)
    model_bytes = rss_bytes() - before
    params = sum(p.numel() for p in lm.model.parameters())
    per_param = model_bytes / params
    ar = run_method(lm, "ar", PROMPT, max_new_tokens=128)
    traced = run_method(lm, "racer", PROMPT, budget=Budget(64), max_new_tokens=new_tokens, trace=True)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.json"
        traced.trace.save(path)
        trace_bytes = path.stat().st_size
        started = time.perf_counter()
        Trace.load(path)
        trace_load_s = time.perf_counter() - started
    started = time.perf_counter()
    run_method(lm, "racer", PROMPT, budget=Budget(16), max_new_tokens=sweep_tokens)
    sweep_run_s = time.perf_counter() - started
    return {"model": lm.name, "params": params, "model_rss_bytes": model_bytes, "rss_bytes_per_param": per_param,
            "projected_rss_bytes": {name: round(n * per_param) for name, n in FAMILY.items()},
            "ar_tokens_per_s": round(ar.tokens_per_s, 2), "seconds_for_new_tokens": round(new_tokens / ar.tokens_per_s, 1),
            "trace_tokens": traced.new_tokens, "trace_bytes": trace_bytes, "trace_load_s": round(trace_load_s, 3),
            "sweep_run_s": round(sweep_run_s, 2)}


