"""vLLM: a chain drafter (EAGLE-3, EAGLE, a draft model) with `num_speculative_tokens`; no static trees.

Rules read from vllm-project/vllm, vllm/config/speculative.py at 002e77c (late 2026): `SpeculativeConfig` is a
pydantic dataclass that forbids unknown keys; `speculative_token_tree` went with tree attention (PR #42121, merged
2026-05); `method` is one of ngram, medusa, mlp_speculator, draft_model, suffix, custom_class, eagle, eagle3, ...;
every method but ngram/suffix/mtp needs `model`; `num_speculative_tokens` > 0 (there is no upper bound, and a
speculators-format head's own count is not always read: pass it). A draft model must share the target's vocabulary.
"""

from __future__ import annotations

import json
from typing import Callable

from specviz.engine_configs.advice import (Drafter, EngineAdvice, RulesSource, best_chain, chain, chain_accepted,
                                    head_location, head_notes, refused, step_speedup)
from specviz.tree.static_tree import RankAcceptance

ENGINE = "vLLM"
RULES = RulesSource(ENGINE, "vllm-project/vllm vllm/config/speculative.py at 002e77c (read 2026-11-28)")
METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
           "extract_hidden_states", "dflash", "ngram_gpu", "dspark", "mtp")
FIELDS = ("method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min",
          "draft_tensor_parallel_size", "max_model_len", "revision", "quantization", "enforce_eager",
          "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
          "suffix_decoding_min_token_prob", "draft_sample_method", "rejection_sample_method")
MODEL_FREE = ("ngram", "ngram_gpu", "suffix", "mtp", "extract_hidden_states")
STATIC_TREE_GONE = ("vLLM no longer takes a static draft tree: `speculative_token_tree` was removed with tree "
                    "attention (vllm-project/vllm PR #42121, merged 2026-05); its drafters propose chains. Use the "
                    "vLLM engine's chain config (num_speculative_tokens), or SGLang or TensorRT-LLM for trees.")
METHOD_BY_KIND = {"eagle3": "eagle3", "eagle": "eagle", "draft-model": "draft_model", "specviz-head": "eagle3"}
MOST_TOKENS = 8


def validate(config: dict) -> list[str]:
    """The problems vLLM's SpeculativeConfig raises for this dict (empty: none)."""
    problems = [f"unexpected keyword argument {key!r}" for key in config if key not in FIELDS]
    if "speculative_token_tree" in config:
        problems.append(STATIC_TREE_GONE)
    method = config.get("method")
    if method not in METHODS:
        problems.append(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if method not in MODEL_FREE and not config.get("model"):
        problems.append("num_speculative_tokens was provided but without speculative model.")
    tokens = config.get("num_speculative_tokens")
    if not isinstance(tokens, int) or tokens <= 0:
        problems.append(f"Expected num_speculative_tokens to be greater than zero ({tokens}).")
    low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
    if low is not None and high is not None and low > high:
        problems.append(f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
    return problems


def refusal(drafter: Drafter) -> str | None:
    """Why vLLM cannot take this drafter (None: it can)."""
    if drafter.kind in METHOD_BY_KIND:
        return None
    why = ("vLLM has no layer-skip drafter (a draft model must be a checkpoint of its own)"
           if drafter.kind == "self-skip" else "the target drafting for itself gains nothing in vLLM")
    return f"{why}: measure a head (eagle:PATH) or a draft model instead."


def advise(drafter: Drafter, acceptance: RankAcceptance, verify_ms: Callable[[int], float],
           level_ms: float) -> EngineAdvice:
    """The chain length k of the largest predicted speedup (k drafter levels, k + 1 tokens verified)."""
    why = refusal(drafter)
    if why:
        return refused(ENGINE, RULES, why)
    best = best_chain(acceptance, verify_ms, level_ms, MOST_TOKENS)
    notes = head_notes(drafter, ENGINE)
    method = METHOD_BY_KIND[drafter.kind]  # specviz's head: an EAGLE-3 head would take its place
    config = {"method": method, "model": head_location(drafter), "num_speculative_tokens": best}
    accepted = chain_accepted(acceptance, best)
    notes.append(f"pass it as `vllm serve TARGET --speculative-config '{json.dumps(config)}'` or "
                 "`LLM(..., speculative_config={...})`; a chain of the drafter's best token at each level.")
    return EngineAdvice(ENGINE, (("method", method), ("num_speculative_tokens", best)), accepted,
                        step_speedup(accepted, best + 1, best, verify_ms, level_ms), best + 1, json.dumps(config),
                        RULES, tuple(notes), tuple(validate(config)), shape=chain(best))
