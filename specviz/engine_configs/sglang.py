"""SGLang: EAGLE's dynamic tree with `--speculative-num-steps` S, `--speculative-eagle-topk` k and
`--speculative-num-draft-tokens` N, the tokens chosen each step by SGLang's own rule (engine_configs.eagle_tree).

Rules read from sgl-project/sglang (main, 2026; python/sglang/srt/arg_groups/speculative_hook.py and server_args.py):
the algorithm is EAGLE, EAGLE3, NEXTN (read as EAGLE), STANDALONE (a separate draft model), NGRAM, DFLASH or DSPARK;
S, k and N are set together or not at all (then SGLang chooses them); with k = 1 SGLang sets N to S + 1 whatever
was asked; N - 1 can be at most the k + (S - 1) k^2 nodes the rule generates.
"""

from __future__ import annotations

import shlex
from typing import Callable

from specviz.engine_configs.advice import (Drafter, DraftShape, EngineAdvice, RulesSource, head_location, head_notes,
                                    refused, step_speedup)
from specviz.engine_configs.eagle_tree import plan, pool_size
from specviz.tree.static_tree import RankAcceptance

ENGINE = "SGLang"
RULES = RulesSource(ENGINE, "sgl-project/sglang python/sglang/srt/arg_groups/speculative_hook.py, "
                            "speculative/spec_utils.py and eagle_utils.py (main, 2026; read 2026-11-28)")
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")
NEEDS_DRAFT = ("EAGLE", "EAGLE3", "STANDALONE")
ALGORITHMS_BY_KIND = {"eagle3": "EAGLE3", "eagle": "EAGLE", "draft-model": "STANDALONE", "specviz-head": "EAGLE3"}


def validate(flags: dict) -> list[str]:
    """The problems SGLang's argument checks raise for these flags (or silently change: k = 1 resets N)."""
    problems = []
    algorithm = str(flags.get("speculative-algorithm", "")).upper()
    if algorithm not in ALGORITHMS:
        problems.append(f"--speculative-algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if algorithm in NEEDS_DRAFT and not flags.get("speculative-draft-model-path"):
        problems.append(f"{algorithm} needs --speculative-draft-model-path")
    steps, topk, tokens = (flags.get(f"speculative-{name}") for name in ("num-steps", "eagle-topk", "num-draft-tokens"))
    given = [value is not None for value in (steps, topk, tokens)]
    if any(given) and not all(given):
        problems.append("--speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens go "
                        "together: with the steps unset SGLang asserts the other two are unset")
    if all(given):
        if min(steps, topk) < 1 or tokens < 2:
            problems.append("steps and top-k must be at least 1, draft tokens at least 2 (the root counts)")
        elif topk == 1 and tokens != steps + 1:
            problems.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                            "speculative_eagle_topk == 1")
        elif tokens - 1 > pool_size(steps, topk):
            problems.append(f"{tokens - 1} draft tokens is more than the {pool_size(steps, topk)} nodes "
                            f"{steps} steps of top-{topk} generate")
    return problems


def refusal(drafter: Drafter) -> str | None:
    """Why SGLang cannot take this drafter (None: it can)."""
    if drafter.kind in ALGORITHMS_BY_KIND:
        return None
    return (f"SGLang drafts with an EAGLE head or a separate draft model (STANDALONE); a {drafter.kind} drafter has "
            "no checkpoint it loads.")


def advise(drafter: Drafter, acceptance: RankAcceptance, verify_ms: Callable[[int], float],
           level_ms: float) -> EngineAdvice:
    why = refusal(drafter)
    if why:
        return refused(ENGINE, RULES, why)
    steps, topk, tokens, accepted = plan(acceptance, verify_ms, level_ms)
    path = head_location(drafter)
    flags = {"speculative-algorithm": ALGORITHMS_BY_KIND[drafter.kind], "speculative-draft-model-path": path,
             "speculative-num-steps": steps, "speculative-eagle-topk": topk, "speculative-num-draft-tokens": tokens}
    notes = [f"SGLang's rule at these settings keeps {tokens - 1} of the {pool_size(steps, topk)} nodes it "
             "generates by path score; the measured chances stand in for the drafter's scores here."]
    if drafter.kind in ("eagle3", "specviz-head"):
        notes.append("SGLang's EAGLE-3 loader expects the LlamaForCausalLMEagle3 layout (weights `midlayer.*`); "
                     "a speculators-format head (`layers.0.*`) loads only where SGLang translates it.")
    notes += head_notes(drafter, ENGINE)
    text = " \\\n  ".join(["python -m sglang.launch_server --model-path TARGET",
                           *(f"--{key} {shlex.quote(str(value))}" for key, value in flags.items())])
    return EngineAdvice(ENGINE, (("speculative-num-steps", steps), ("speculative-eagle-topk", topk),
                                 ("speculative-num-draft-tokens", tokens)), accepted,
                        step_speedup(accepted, tokens, steps, verify_ms, level_ms), tokens, text, RULES, tuple(notes),
                        tuple(validate(flags)), shape=DraftShape(steps=steps, topk=topk, drafts=tokens - 1))
