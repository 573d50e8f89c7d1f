"""`python -m specviz space-figures`: the figures behind public mode's limits (ui/public.py), measured here: the
process memory one loaded model takes (and what that projects to for the SmolLM2 family by parameter count), plain
decoding's speed (what a Run of the new-token limit holds a queue place for), a traced run's size at the largest
fixed budget a visitor can ask for (the upload limit), one sweep run's time (the sweep limit), and the memory budget
of public mode: the models, one live session at the prompt cap, the sessions the limit lets live at once."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

# KV cache bytes per token in fp32 of the SmolLM2 Instruct models (their configs: layers x 2 x kv heads x 64 x 4)
KV_BYTES_PER_TOKEN = {"HuggingFaceTB/SmolLM2-135M-Instruct": 30 * 2 * 3 * 64 * 4,
                      "HuggingFaceTB/SmolLM2-360M-Instruct": 32 * 2 * 5 * 64 * 4,
                      "HuggingFaceTB/SmolLM2-1.7B-Instruct": 24 * 2 * 32 * 64 * 4}
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


def measure(new_tokens: int = 512, sweep_tokens: int = 64) -> dict:
    from specviz.engine.run import run_method
    from specviz.records.trace import Trace
    from specviz.runtime.shared import shared_model

    before = rss_bytes()
    lm = shared_model(None)
    model_bytes = rss_bytes() - before
    params = sum(p.numel() for p in lm.model.parameters())
    per_param = model_bytes / params
    ar = run_method(lm, "ar", PROMPT, max_new_tokens=128)
    traced = run_method(lm, "racer", PROMPT, budget=64, max_new_tokens=new_tokens, trace=True)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.json"
        traced.trace.save(path)
        trace_bytes = path.stat().st_size
        started = time.perf_counter()
        Trace.load(path)
        trace_load_s = time.perf_counter() - started
    started = time.perf_counter()
    run_method(lm, "racer", PROMPT, budget=16, max_new_tokens=sweep_tokens)
    sweep_run_s = time.perf_counter() - started
    budget = {"process_before_model_bytes": before, **memory_budget(lm, model_bytes, per_param)}
    return {"model": lm.name, "params": params, "memory_budget": budget, "model_rss_bytes": model_bytes, "rss_bytes_per_param": per_param,
            "projected_rss_bytes": {name: round(n * per_param) for name, n in FAMILY.items()},
            "ar_tokens_per_s": round(ar.tokens_per_s, 2), "seconds_for_new_tokens": round(new_tokens / ar.tokens_per_s, 1),
            "trace_tokens": traced.new_tokens, "trace_bytes": trace_bytes, "trace_load_s": round(trace_load_s, 3),
            "sweep_run_s": round(sweep_run_s, 2)}


def memory_budget(lm, model_bytes: int, per_param: float) -> dict:
    """Public mode's memory budget from measured parts: each allowed model's resident bytes (the default's
    measured, the others projected by parameter count), one unified session at the prompt cap (measured: its
    KV caches, the paired ar run's and their buffers after a step, scaled to the longest session the limits allow
    and to the largest allowed model by KV bytes per token), times the live-session limit."""
    from specviz.runtime.loading import DEFAULT_MODEL
    from specviz.ui.lab import Lab
    from specviz.ui.public import DEFAULT_ALLOWED, MAX_LIVE_SESSIONS, MAX_NEW_TOKENS, MAX_PROMPT_TOKENS

    text, ids = PROMPT, lm.tokenizer.encode(PROMPT)
    while len(ids) < MAX_PROMPT_TOKENS - 64:  # a long prompt just under the cap (the chat template adds a few)
        text += " " + PROMPT
        ids = lm.tokenizer.encode(text)
    before = rss_bytes()
    lab = Lab()
    lab.apply("", text, "unified", "auto", {})
    lab.step(4)
    session_tokens = len(lab.session.context)
    session_bytes = rss_bytes() - before
    per_token = session_bytes / session_tokens
    longest = MAX_PROMPT_TOKENS + MAX_NEW_TOKENS
    largest = max(DEFAULT_ALLOWED, key=lambda name: KV_BYTES_PER_TOKEN.get(name, 0))
    measured = KV_BYTES_PER_TOKEN["HuggingFaceTB/SmolLM2-135M-Instruct"]  # the default model is its GGUF twin
    session_at_cap = per_token * longest * KV_BYTES_PER_TOKEN[largest] / measured
    models = {name: round(model_bytes if name == DEFAULT_MODEL else FAMILY.get(name, 0) * per_param)
              for name in DEFAULT_ALLOWED}
    lab.release()
    return {"session_tokens": session_tokens, "session_rss_bytes": session_bytes,
            "session_bytes_per_token": round(per_token), "longest_session_tokens": longest,
            "session_at_cap_bytes": round(session_at_cap), "largest_model": largest,
            "models_bytes": models, "live_sessions": MAX_LIVE_SESSIONS,
            "total_bytes": round(sum(models.values()) + MAX_LIVE_SESSIONS * session_at_cap)}
