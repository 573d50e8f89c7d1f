"""Acceptance by rank path for a drafter, measured along the target's own greedy continuation.

For every prompt, `ar` gives the target's continuation; at every position of it (with `depth` tokens after),
the drafter is teacher-forced along the true next tokens and the rank of each under the drafter is read:
the node at rank path (r1, ..., rd) of a static tree is accepted there exactly when those ranks are r1..rd
(tree.static_tree). A draft model (the target itself, self-skip:K, another model) conditioned on the true
prefix is its next-token distribution, so one causal pass over prompt and continuation gives every level's
rank; the draft head drafts deeper levels from its own predicted features, so it runs level by level at each
position (drafters.head.HeadDrafter.ranks_along).

The verified trees specviz drafts in sessions do not carry this: a node's rank among its drafter's proposals
is not kept, and a dynamic tree holds only the ranks it chose to expand. The probe measures every path up to
the ranks and depth asked for, on real prompts, with one target run per prompt.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from specviz.drafters.head import HeadDrafter
from specviz.drafters.static_shape import token_ranks
from specviz.engine.run import run_method
from specviz.studies.suite import SuiteItem
from specviz.tree.budget import Budget
from specviz.runtime.block_forward import causal_features, chain_forward
from specviz.runtime.draft_head import DraftHead
from specviz.runtime.eagle_head import EagleHead, drafts_from_features
from specviz.runtime.kv import new_cache
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.prompts import encode
from specviz.tree.static_tree import RankAcceptance

CHUNK = 512


@dataclass(frozen=True)
class RankMeasurement:
    acceptance: RankAcceptance
    level_ms: float      # median time of one drafter forward of one level (one node: the head's or a token's)
    prompts: int
    greedy: tuple = ()   # (prompt ids, the target's greedy continuation) per prompt, as tuples of ints


@torch.inference_mode()
def model_rank_sequences(drafter: LoadedModel, prompt_ids: list[int], continuation: list[int],
                         depth: int) -> tuple[list[list[int]], list[float]]:
    """Per position of the continuation with depth tokens after it: the draft model's rank of each of them.
    Returns those and the time of a few one-token forwards of the drafter (ms)."""
    ids = list(prompt_ids) + list(continuation)
    cache = new_cache(drafter.model.config)
    ranks: list[int] = []  # ranks[i]: rank of ids[len(prompt) + i] given ids before it
    for start in range(0, len(ids) - 1, CHUNK):
        end = min(start + CHUNK, len(ids) - 1)
        logits = chain_forward(drafter, cache, ids[start:end], start).float().cpu()
        first = max(start, len(prompt_ids) - 1)  # rows that predict continuation tokens
        if first < end:
            rows = logits[first - start:]
            ranks += token_ranks(rows, torch.tensor(ids[first + 1:end + 1]))
    sequences = [ranks[t:t + depth] for t in range(len(continuation) - depth + 1)]
    times = []
    for token in continuation[:3]:  # a level of a chain: one token's forward on the drafter's cache
        started = time.perf_counter()
        chain_forward(drafter, cache, [token], cache.get_seq_length())
        times.append((time.perf_counter() - started) * 1000)
    return sequences, times


@torch.inference_mode()
def head_rank_sequences(lm: LoadedModel, head: DraftHead | EagleHead, prompt_ids: list[int], continuation: list[int],
                        depth: int) -> tuple[list[list[int]], list[float]]:
    """As model_rank_sequences for the draft head (its features from one causal pass of the target)."""
    ids = list(prompt_ids) + list(continuation)
    drafter = HeadDrafter(head, breadth=1, expand=1, depth=depth, nodes=depth)
    drafter.prefill_chunk(ids, 0, None, causal_features(lm, ids[:-1], head.feature_tap, CHUNK))
    sequences, times = [], []
    for t in range(len(continuation) - depth + 1):
        n = len(prompt_ids) + t
        sequences.append(drafter.ranks_along(ids[:n], continuation[t:t + depth], depth))
        if t:  # the first call fed the whole prompt
            times.extend(drafter.forward_ms[1:])  # the level forwards (the first fed the root)
    return sequences, times


def measure_ranks(lm: LoadedModel, drafter, label: str, suite: list[SuiteItem], depth: int, max_rank: int,
                  max_new_tokens: int, progress: Callable[[int, int, str], None] | None = None) -> RankMeasurement:
    """drafter: a DraftHead or EagleHead, or a LoadedModel drafting (the target itself for `self`, self-skip:K, another).
    progress(done, total, label) after each prompt."""
    sequences, times, greedy = [], [], []
    for done, item in enumerate(suite):
        if progress is not None:
            progress(done, len(suite), f"prompt {done + 1} of {len(suite)}: {item.id}")
        prompt_ids = encode(lm.tokenizer, item.messages, lm.max_context)
        limit = item.limit(max_new_tokens)
        continuation = run_method(lm, "ar", prompt_ids=prompt_ids, budget=Budget(1), max_new_tokens=limit).output_ids
        greedy.append((tuple(prompt_ids), tuple(continuation)))
        if len(continuation) < depth:
            continue
        if drafts_from_features(drafter):
            found, ms = head_rank_sequences(lm, drafter, prompt_ids, continuation, depth)
        else:
            found, ms = model_rank_sequences(drafter, prompt_ids, continuation, depth)
        sequences += found
        times += ms
    return RankMeasurement(RankAcceptance.from_rank_sequences(label, sequences, depth, max_rank),
                           round(statistics.median(times), 3) if times else 0.0, len(suite), tuple(greedy))
