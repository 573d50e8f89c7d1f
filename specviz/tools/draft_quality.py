"""How good and how cheap is a draft model here: greedy chains drafted along `ar`'s own output.

At every position of the target's greedy continuation the draft model drafts a greedy chain of `depth`
tokens from the true prefix; level d is accepted when the chain's first d tokens are the target's next d.
Reported per depth: the acceptance rate (share of positions whose chain is accepted to depth d), the
conditional rate (accepted at d given accepted at d - 1: the per-level alpha a planner uses) and the
median milliseconds of one draft level (a one-token forward with the drafter's own KV cache; for the
draft head, one head forward of one node). `self` drafts with the target's own forward: its level is a
one-token target forward, measured in the same run.
"""

from __future__ import annotations

import statistics
import time

import torch

from specviz.drafters.head import HeadDrafter
from specviz.runtime.block_forward import causal_forward, masked_forward
from specviz.runtime.draft_head import DraftHead
from specviz.runtime.kv import new_cache
from specviz.runtime.prompts import encode
from specviz.engine.run import run_method
from specviz.tree.draft_tree import ROOT


def _feed(drafter, cache, tokens: list[int], start: int) -> torch.Tensor:
    """Causal forward of tokens at positions start.. on the cache; logits of the last one."""
    past = start
    visible = torch.ones((len(tokens), past + len(tokens)), dtype=torch.bool)
    visible[:, past:] = torch.tril(torch.ones((len(tokens), len(tokens)), dtype=torch.bool))
    return masked_forward(drafter, cache, tokens, list(range(past, past + len(tokens))), visible)[-1]


@torch.inference_mode()
def chain_acceptance(lm, drafter_model, prompt_ids: list[int], continuation: list[int], depth: int):
    """Per position: how many levels of the drafted chain match the continuation; and level times (ms)."""
    ids = list(prompt_ids) + list(continuation)
    cache = new_cache(drafter_model.model.config)
    _feed(drafter_model, cache, ids[:len(prompt_ids) - 1], 0)
    accepted, level_ms = [], []
    for t in range(len(continuation)):
        n = len(prompt_ids) + t          # the prefix is ids[:n]; the cache holds ids[:n - 1]
        token, matched, alive = ids[n - 1], 0, True
        for level in range(min(depth, len(continuation) - t)):
            started = time.perf_counter()
            logits = _feed(drafter_model, cache, [token], n - 1 + level)
            level_ms.append((time.perf_counter() - started) * 1000)
            token = int(logits.argmax())
            alive = alive and token == continuation[t + level]
            matched += alive
        accepted.append(matched)
        cache.crop(-(cache.get_seq_length() - n))  # keep ids[:n]: the first fed token was the true one
    return accepted, level_ms


@torch.inference_mode()
def head_chain_acceptance(lm, head: DraftHead, prompt_ids: list[int], continuation: list[int], depth: int):
    """chain_acceptance for the draft head: the target's features along prompt and continuation come from
    one causal pass (as a session's prefill gives them), then at each position the head drafts a greedy
    chain (breadth 1, one node expanded per level, never stopped early)."""
    ids = list(prompt_ids) + list(continuation)
    cache, features = new_cache(lm.model.config), []
    for start in range(0, len(ids) - 1, 512):
        features.append(causal_forward(lm, cache, ids[start:min(start + 512, len(ids) - 1)], features=True)[1])
    drafter = HeadDrafter(head, breadth=1, expand=1, depth=depth, nodes=depth)
    drafter.min_path_chance = 0.0
    drafter.prefill_chunk(ids, 0, None, torch.cat(features))
    accepted, level_ms = [], []
    for t in range(len(continuation)):
        n = len(prompt_ids) + t
        tree = drafter.propose(ids[:n], min(depth, len(continuation) - t))
        if t:  # the first proposal fed the whole prompt
            level_ms.extend(drafter.forward_ms)
        matched, node = 0, ROOT
        for level in range(min(depth, len(continuation) - t)):
            children = tree.children(node)
            if not children or tree.tokens[children[0]] != continuation[t + level]:
                break
            node, matched = children[0], matched + 1
        accepted.append(matched)
    return accepted, level_ms


def measure(lm, drafters: dict, suite: list[dict], depth: int = 6, max_new_tokens: int = 32) -> dict:
    """drafters: label -> LoadedModel (the target itself for the full self-draft, its self-skip:K...) or
    DraftHead (the trained head)."""
    per_label = {label: ([], []) for label in drafters}
    for item in suite:
        prompt_ids = encode(lm.tokenizer, item["messages"], lm.max_context)
        limit = int(item.get("max_new_tokens", max_new_tokens))
        reference = run_method(lm, "ar", prompt_ids=prompt_ids, max_new_tokens=limit)
        for label, model in drafters.items():
            chains = head_chain_acceptance if isinstance(model, DraftHead) else chain_acceptance
            accepted, level_ms = chains(lm, model, prompt_ids, reference.output_ids, depth)
            per_label[label][0].extend(accepted)
            per_label[label][1].extend(level_ms)
    report = {}
    for label, (accepted, level_ms) in per_label.items():
        positions = len(accepted)
        reach = [sum(a >= d for a in accepted) / positions for d in range(1, depth + 1)]
        conditional = [reach[0]] + [reach[d] / reach[d - 1] if reach[d - 1] else 0.0 for d in range(1, depth)]
        report[label] = {"positions": positions, "accepted_to_depth": [round(r, 3) for r in reach],
                         "alpha_by_depth": [round(c, 3) for c in conditional],
                         "mean_accepted": round(sum(accepted) / positions, 3),
                         "ms_per_level": round(statistics.median(level_ms), 2)}
    return report


def format_report(report: dict) -> str:
    depth = len(next(iter(report.values()))["accepted_to_depth"])
    head = f"{'drafter':<22} {'ms/level':>8} {'mean acc':>8}  " + " ".join(f"{'d' + str(d):>6}" for d in
                                                                          range(1, depth + 1))
    lines = [head]
    for label, r in report.items():
        lines.append(f"{label:<22} {r['ms_per_level']:>8.2f} {r['mean_accepted']:>8.2f}  "
                     + " ".join(f"{x:>6.3f}" for x in r["accepted_to_depth"]) + "   (accepted to depth d)")
        lines.append(f"{'':<22} {'':>8} {'':>8}  " + " ".join(f"{x:>6.3f}" for x in r["alpha_by_depth"])
                     + "   (alpha at d given d - 1)")
    return "\n".join(lines)
