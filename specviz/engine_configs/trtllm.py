"""TensorRT-LLM: `Eagle3DecodingConfig` with `max_draft_len` (drafter layers), and for a tree its dynamic-tree
settings (`use_dynamic_tree`, `dynamic_tree_max_topK`, `max_total_draft_tokens`), the tree chosen each step by
EAGLE-2's rule as in SGLang (engine_configs.eagle_tree).

Rules read from NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py at 0004396 (2026): `speculative_model` is
required ("Draft model must be provided for EAGLE"); `max_draft_len` > 0; a dynamic tree needs
`dynamic_tree_max_topK`, and `max_total_draft_tokens` must lie in [max_draft_len, topK x max_draft_len]; without a
tree `max_total_draft_tokens` is overwritten with `max_draft_len`. The static `eagle_choices` is deprecated ("will be
removed in release 1.4"; PR #18210 removes it), so it is not printed; a plain `Eagle` config is read as `Eagle3`.
"""

from __future__ import annotations

import json
from typing import Callable

from specviz.engine_configs.advice import (Drafter, DraftShape, EngineAdvice, RulesSource, best_chain, chain, chain_accepted,
                                    head_location, head_notes, refused, step_speedup)
from specviz.engine_configs.eagle_tree import plan
from specviz.tree.static_tree import RankAcceptance

ENGINE = "TensorRT-LLM"
RULES = RulesSource(ENGINE, "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py at 0004396 (2026; read 2026-11-28)")
DECODING_TYPES = ("Eagle3", "Eagle", "DraftTarget", "NGram", "MTP")
DECODING_BY_KIND = {"eagle3": "Eagle3", "specviz-head": "Eagle3", "draft-model": "DraftTarget"}
MOST_LAYERS = 8  # the longest chain a separate draft model is given
STATIC_CHOICES = ("eagle_choices (the static tree) is deprecated in TensorRT-LLM and will be removed in release 1.4; "
                  "use its dynamic tree (use_dynamic_tree, dynamic_tree_max_topK, max_total_draft_tokens).")


def validate(config: dict) -> list[str]:
    """The problems TensorRT-LLM's validators raise for this speculative_config (empty: none)."""
    problems = []
    kind = config.get("decoding_type")
    if kind not in DECODING_TYPES:
        problems.append(f"decoding_type must be one of {', '.join(DECODING_TYPES)}, got {kind!r}")
    depth = config.get("max_draft_len")
    if not isinstance(depth, int) or depth <= 0:
        problems.append("max_draft_len must be > 0 for Eagle")
        depth = 0
    if kind in ("Eagle3", "Eagle", "DraftTarget") and not config.get("speculative_model"):
        problems.append("Draft model must be provided for EAGLE")
    if config.get("eagle_choices") is not None:
        problems.append(STATIC_CHOICES)
        if config.get("use_dynamic_tree"):
            problems.append("If eagle_choices is provided, use_dynamic_tree should be False")
    if config.get("use_dynamic_tree"):
        topk, total = config.get("dynamic_tree_max_topK"), config.get("max_total_draft_tokens")
        if not isinstance(topk, int) or topk < 1:
            problems.append("dynamic_tree_max_topK should be provided, which indicates the number of nodes to "
                            "expand each time")
        elif total is not None and not depth <= total <= topk * depth:
            problems.append(f"max_total_draft_tokens ({total}) must be in [max_draft_len ({depth}), "
                            f"dynamic_tree_max_topK * max_draft_len ({topk * depth})]")
    return problems


def yaml_text(config: dict) -> str:
    """The config under `speculative_config:` as YAML (strings as JSON strings, which YAML reads as they are)."""
    return "speculative_config:\n" + "".join(f"  {key}: {json.dumps(value)}\n" for key, value in config.items())


def refusal(drafter: Drafter) -> str | None:
    """Why TensorRT-LLM cannot take this drafter (None: it can)."""
    if drafter.kind == "eagle":
        return ("TensorRT-LLM reads an Eagle config as Eagle3 and does not load EAGLE-1/2 checkpoints: measure an "
                "EAGLE-3 head, or use vLLM or SGLang for this one.")
    if drafter.kind not in DECODING_BY_KIND:
        return (f"TensorRT-LLM drafts with an EAGLE-3 head or a separate draft model; a {drafter.kind} drafter has "
                "no checkpoint it loads.")
    return None


def advise(drafter: Drafter, acceptance: RankAcceptance, verify_ms: Callable[[int], float],
           level_ms: float) -> EngineAdvice:
    why = refusal(drafter)
    if why:
        return refused(ENGINE, RULES, why)
    if drafter.kind == "draft-model":  # a separate model drafts a chain
        steps, topk = best_chain(acceptance, verify_ms, level_ms, MOST_LAYERS), 1
    else:
        # its dynamic tree keeps between max_draft_len and topK x max_draft_len drafts
        steps, topk, tokens, accepted = plan(acceptance, verify_ms, level_ms,
                                             lambda steps, topk, drafts: steps <= drafts <= topk * steps)
    config = {"decoding_type": DECODING_BY_KIND[drafter.kind], "max_draft_len": steps,
              "speculative_model": head_location(drafter)}
    if topk == 1:  # a chain: no tree settings (max_total_draft_tokens becomes max_draft_len)
        tokens, accepted = steps + 1, chain_accepted(acceptance, steps)
        knobs: tuple = (("max_draft_len", steps),)
        shape = chain(steps)
    else:
        config.update(use_dynamic_tree=True, dynamic_tree_max_topK=topk, max_total_draft_tokens=tokens - 1)
        knobs = (("max_draft_len", steps), ("dynamic_tree_max_topK", topk), ("max_total_draft_tokens", tokens - 1))
        shape = DraftShape(steps=steps, topk=topk, drafts=tokens - 1)
    notes = [STATIC_CHOICES, "pass it in the YAML of `trtllm-serve TARGET --config FILE`, or as "
             "`LLM(..., speculative_config=Eagle3DecodingConfig(...))`."]
    notes += head_notes(drafter, ENGINE)
    return EngineAdvice(ENGINE, knobs, accepted, step_speedup(accepted, tokens, steps, verify_ms, level_ms), tokens,
                        yaml_text(config), RULES, tuple(notes), tuple(validate(config)), shape=shape)
