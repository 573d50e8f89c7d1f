"""How good and how cheap is a draft model here: greedy chains drafted along `ar`'s own output.

At every position of the target's greedy continuation the draft model drafts a greedy chain of `depth`
tokens from the true prefix; level d is accepted when the chain's first d tokens are the target's next d
(counted at the positions with at least `depth` tokens of the continuation left).
Reported per depth: the acceptance rate (share of positions whose chain is accepted to depth d), the
conditional rate (accepted at d given accepted at d - 1: the per-level alpha a planner uses) and the
median milliseconds of one draft level (a one-token forward with the drafter's own KV cache; for the
draft head, one head forward of one node). `self` drafts with the target's own forward: its level is a
one-token target forward, measured in the same run, and each row's level is also given as a share of it.
The draft head gets a second row, "(tree)": its EAGLE-2 dynamic tree at the default HEAD_PARAMS, accepted
along the path that matches the continuation longest (what a greedy verification accepts of it).
"""

from __future__ import annotations

import statistics
import time

import torch

from specviz.drafters.head import HEAD_PARAMS, HeadDrafter, head_drafter
from specviz.params import resolve
from specviz.runtime.block_forward import causal_features, chain_forward
from specviz.runtime.draft_head import DraftHead
from specviz.runtime.eagle_head import EagleHead, drafts_from_features
from specviz.runtime.kv import new_cache
from specviz.runtime.prompts import encode
from specviz.engine.run import run_method
from specviz.studies.suite import SuiteItem
from specviz.tree.draft_tree import ROOT


def _feed(drafter, cache, tokens: list[int], start: int) -> torch.Tensor:
    """Causal forward of tokens at positions start.. on the cache; logits of the last one."""
    return chain_forward(drafter, cache, tokens, start)[-1]


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
        if len(continuation) - t >= depth:  # only positions whose every depth can be checked
            accepted.append(matched)
        cache.crop(-(cache.get_seq_length() - n))  # keep ids[:n]: the first fed token was the true one
    return accepted, level_ms


@torch.inference_mode()
def head_chain_acceptance(lm, head: DraftHead | EagleHead, prompt_ids: list[int], continuation: list[int], depth: int,
                          tree_params: dict | None = None):
    """chain_acceptance for the draft head: the target's features along prompt and continuation come from
    one causal pass (as a session's prefill gives them), then at each position the head drafts a greedy
    chain (breadth 1, one node expanded per level, never stopped early). tree_params (HEAD_PARAMS values):
    the head's dynamic tree instead, accepted along its path that matches the continuation longest; its
    level time is then a whole level's forward (up to head_expand nodes)."""
    ids = list(prompt_ids) + list(continuation)
    features = causal_features(lm, ids[:-1], head.feature_tap)
    if tree_params is None:
        drafter = HeadDrafter(head, breadth=1, expand=1, depth=depth, nodes=depth)
        drafter.min_path_chance = 0.0
    else:
        drafter = head_drafter(head, {**tree_params, "head_depth": depth})
    drafter.prefill_chunk(ids, 0, None, features)
    accepted, level_ms = [], []
    for t in range(len(continuation)):
        n = len(prompt_ids) + t
        tree = drafter.propose(ids[:n], drafter.nodes if tree_params else min(depth, len(continuation) - t))
        if t:  # the first proposal fed the whole prompt
            level_ms.extend(drafter.forward_ms)  # a forward per level (the first feeds the root: level 1's q)
        matched, node = 0, ROOT
        for level in range(min(depth, len(continuation) - t)):
            child = tree.child_with_token(node, continuation[t + level])
            if child is None:
                break
            node, matched = child, matched + 1
        if len(continuation) - t >= depth:  # only positions whose every depth can be checked
            accepted.append(matched)
    return accepted, level_ms


def measure_draft_quality(lm, drafters: dict, suite: list[SuiteItem], depth: int = 6, max_new_tokens: int = 32) -> dict:
    """drafters: label -> LoadedModel (the target itself for the full self-draft, its self-skip:K...) or
    DraftHead (the trained head) or EagleHead (a published one)."""
    per_label = {label: ([], []) for label in drafters}
    for item in suite:
        prompt_ids = encode(lm.tokenizer, item.messages, lm.max_context)
        limit = item.limit(max_new_tokens)
        reference = run_method(lm, "ar", prompt_ids=prompt_ids, max_new_tokens=limit)
        for label, model in drafters.items():
            if drafts_from_features(model):
                runs = {label: head_chain_acceptance(lm, model, prompt_ids, reference.output_ids, depth),
                        f"{label} (tree)": head_chain_acceptance(lm, model, prompt_ids, reference.output_ids, depth,
                                                                 resolve(HEAD_PARAMS, {}, "draft-quality"))}
            else:
                runs = {label: chain_acceptance(lm, model, prompt_ids, reference.output_ids, depth)}
            for name, (accepted, level_ms) in runs.items():
                per_label.setdefault(name, ([], []))
                per_label[name][0].extend(accepted)
                per_label[name][1].extend(level_ms)
    report = {}
    for label, (accepted, level_ms) in per_label.items():
        positions = len(accepted)
        reach = [sum(a >= d for a in accepted) / positions for d in range(1, depth + 1)]
        conditional = [reach[0]] + [reach[d] / reach[d - 1] if reach[d - 1] else 0.0 for d in range(1, depth)]
        report[label] = {"positions": positions, "accepted_to_depth": [round(r, 3) for r in reach],
                         "alpha_by_depth": [round(c, 3) for c in conditional],
                         "mean_accepted": round(sum(accepted) / positions, 3),
                         "ms_per_level": round(statistics.median(level_ms), 3)}
    if "self" in report:  # a level against a one-token target forward, both measured in this run
        for r in report.values():
            r["share_of_target_forward"] = round(r["ms_per_level"] / report["self"]["ms_per_level"], 3)
    return report


def format_report(report: dict) -> str:
    depth = len(next(iter(report.values()))["accepted_to_depth"])
    width = max(22, *(len(label) for label in report))
    head = (f"{'drafter':<{width}} {'ms/level':>8} {'x fwd':>6} {'mean acc':>8}  "
            + " ".join(f"{'d' + str(d):>6}" for d in range(1, depth + 1)))
    lines = [head]
    for label, r in report.items():
        share = f"{r['share_of_target_forward']:>6.3f}" if "share_of_target_forward" in r else f"{'':>6}"
        lines.append(f"{label:<{width}} {r['ms_per_level']:>8.2f} {share} {r['mean_accepted']:>8.2f}  "
                     + " ".join(f"{x:>6.3f}" for x in r["accepted_to_depth"]) + "   (accepted to depth d)")
        lines.append(f"{'':<{width}} {'':>8} {'':>6} {'':>8}  " + " ".join(f"{x:>6.3f}" for x in r["alpha_by_depth"])
                     + "   (alpha at d given d - 1)")
    return "\n".join(lines)


