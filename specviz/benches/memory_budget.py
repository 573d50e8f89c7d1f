"""Public mode's memory budget, from measured parts (`python -m specviz dev space-figures` prints it): each allowed
model's resident bytes, one live session at the prompt cap, and the sessions the limit lets live at once."""

from __future__ import annotations

from specviz.runtime.loading import DEFAULT_MODEL
from specviz.runtime.memory_release import give_back_freed_memory
from specviz.benches.space_figures import FAMILY, PROMPT, rss_bytes
from specviz.lab.lab import Lab
from specviz.tree.budget import AUTO_BUDGET
from specviz.lab.public_policy import (DEFAULT_ALLOWED, MAX_LIVE_BYTES, MAX_LIVE_SESSIONS, MAX_NEW_TOKENS,
                               MAX_PROMPT_TOKENS)

MODEL_CONCURRENCY = 2  # model calls at once (SPECVIZ_MODEL_CONCURRENCY's default, panels/page_context.py)

# KV cache bytes per token in fp32 of the SmolLM2 Instruct models (their configs: layers x 2 x kv heads x 64 x 4)
KV_BYTES_PER_TOKEN = {"HuggingFaceTB/SmolLM2-135M-Instruct": 30 * 2 * 3 * 64 * 4,
                      "HuggingFaceTB/SmolLM2-360M-Instruct": 32 * 2 * 5 * 64 * 4,
                      "HuggingFaceTB/SmolLM2-1.7B-Instruct": 24 * 2 * 32 * 64 * 4}


def memory_budget(lm, model_bytes: int, per_param: float) -> dict:
    """Public mode's memory budget from measured parts: each allowed model's resident bytes (the default's
    measured, the others projected by parameter count), one unified session at the prompt cap (measured: its
    KV caches and the paired ar run's after a step, with the freed heap given back, scaled to the longest session
    the limits allow and to the largest allowed model by KV bytes per token) times the live-session limit, and
    what one model call holds while it works (the freed heap it left) times the calls that run at once."""
    text, ids = PROMPT, lm.tokenizer.encode(PROMPT)
    while len(ids) < 2048 - 64:  # a prompt of about 2,000 tokens (the chat template adds a few)
        text += " " + PROMPT
        ids = lm.tokenizer.encode(text)
    give_back_freed_memory()  # the heap keeps what steps free (runtime.memory_release): measure without it
    before = rss_bytes()
    lab = Lab()
    lab.choose_values("", text, "unified", AUTO_BUDGET, {})
    lab.step(4)
    session_tokens = len(lab.session.context)
    with_heap = rss_bytes() - before
    give_back_freed_memory()
    session_bytes = rss_bytes() - before   # what the session keeps: its KV caches, the paired ar run's, drafters
    working_bytes = max(0, with_heap - session_bytes)  # what one call's work held and freed (prefill logits ...)
    per_token = session_bytes / session_tokens
    longest = MAX_PROMPT_TOKENS + MAX_NEW_TOKENS
    largest = max(DEFAULT_ALLOWED, key=lambda name: KV_BYTES_PER_TOKEN.get(name, 0))
    measured = KV_BYTES_PER_TOKEN["HuggingFaceTB/SmolLM2-135M-Instruct"]  # the default model is its GGUF twin
    scale = KV_BYTES_PER_TOKEN[largest] / measured
    session_at_cap = per_token * longest * scale
    working_at_cap = working_bytes * longest / session_tokens * scale
    models = {name: round(model_bytes if name == DEFAULT_MODEL else FAMILY.get(name, 0) * per_param)
              for name in DEFAULT_ALLOWED}
    lab.release()
    sessions = min(MAX_LIVE_SESSIONS * session_at_cap, MAX_LIVE_BYTES * scale)  # the limit counts bytes
    total = sum(models.values()) + sessions + MODEL_CONCURRENCY * working_at_cap
    return {"session_tokens": session_tokens, "session_rss_bytes": session_bytes,
            "session_bytes_per_token": round(per_token), "longest_session_tokens": longest,
            "session_at_cap_bytes": round(session_at_cap), "largest_model": largest,
            "call_working_bytes": working_bytes, "call_working_at_cap_bytes": round(working_at_cap),
            "model_calls_at_once": MODEL_CONCURRENCY, "models_bytes": models, "live_sessions": MAX_LIVE_SESSIONS,
            "live_bytes": MAX_LIVE_BYTES, "sessions_bytes": round(sessions), "total_bytes": round(total)}
