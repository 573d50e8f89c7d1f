"""A draft language model (`model` source) with its own KV cache: another model of the target's vocabulary, or
the target's own weights (self-speculation: no second copy of the weights, only a second cache).

A proposal feeds the committed tokens the draft cache lacks, then grows the tree one draft forward per level
(top-`breadth` on the first `branch_levels` levels, then greedy, down to `depth`); after verification the cache keeps
what the target accepted. `own_prompt` and `sampler` serve RAPID's RAG drafter: a prompt of its own, and children
drawn from q with the seed's noise.

Design notes: docs/design.md, "specviz/drafters/draft_model.py".
"""

from __future__ import annotations

import torch

from specviz.accept.position_noise import PositionNoise
from specviz.accept.sampling import SamplingSettings, sampling_probs
from specviz.drafters.base import Drafter, StepOutcome
from specviz.drafters.static_shape import grow_static
from specviz.params import Param
from specviz.runtime import state_pickle
from specviz.runtime.kv import keep_accepted, new_cache
from specviz.runtime.loading import LoadedModel
from specviz.tree.draft_tree import ROOT, DraftTree
from specviz.runtime.block_forward import masked_forward

FEED_CHUNK = 512

# the draft model's tree shape, as every method that drafts with it shows it
DRAFT_MODEL_PARAMS = [
    Param("draft_breadth", 2, 1, 8, int, "model drafter: top-k children per node on the branching levels"),
    Param("branch_levels", 1, 0, 4, int, "model drafter: levels that branch; deeper levels are greedy"),
    Param("draft_depth", 4, 1, 16, int, "model drafter: levels drafted (one draft forward each)"),
]


class DraftModelDrafter(Drafter):
    source = "model"

    def __init__(self, lm: LoadedModel, vocab_size: int, breadth: int = 2, branch_levels: int = 1, depth: int = 4,
                 sampler: tuple[SamplingSettings, PositionNoise] | None = None):
        self.lm, self.vocab_size = lm, vocab_size
        self.breadth, self.branch_levels, self.depth = breadth, branch_levels, depth
        self.sampler = sampler if sampler is not None and not sampler[0].greedy else None
        self.own_prompt: list[int] | None = None   # the drafter's prompt in place of the target's ...
        self.target_prompt_len = 0                  # ... which was this long
        self.cache = new_cache(lm.model.config)
        self.cached = 0                      # committed tokens whose entries the draft cache holds
        self.tree: DraftTree | None = None   # last proposal, and the cache slot of each of its nodes
        self.slot: dict[int, int] = {}
        self.forwards = 0                    # draft forwards in the last proposal
        self.static_paths: list[tuple[int, ...]] | None = None  # a static tree of rank paths to draft instead

    def __getstate__(self):
        """Carried without caches (runtime.state_pickle): an empty cache; the next proposal feeds the whole context."""
        state = dict(self.__dict__)
        if not state_pickle.caches_travel():
            state.update(cache=new_cache(self.lm.model.config), cached=0, tree=None, slot={})
        return state

    @torch.inference_mode()
    def _feed(self, tokens: list[int]) -> torch.Tensor:
        """Causal forward of committed tokens after the cached ones; the last row's logits."""
        logits = None
        for start in range(0, len(tokens), FEED_CHUNK):
            chunk = tokens[start:start + FEED_CHUNK]
            past = self.cache.get_seq_length()
            # an explicit causal mask takes the grouped attention path that reads the cache in place
            visible = torch.ones((len(chunk), past + len(chunk)), dtype=torch.bool).tril(past)
            logits = masked_forward(self.lm, self.cache, chunk, list(range(past, past + len(chunk))),
                                    visible)[-1]
            self.forwards += 1
        return logits[:self.vocab_size]

    def use_prompt(self, own_prompt: list[int], target_prompt_len: int) -> None:
        """Draft on own_prompt + the generated tokens instead of the target's context."""
        if not own_prompt or self.cached:
            raise ValueError("use_prompt takes a non-empty prompt, before the first proposal")
        self.own_prompt, self.target_prompt_len = list(own_prompt), target_prompt_len

    def own_context(self, context: list[int]) -> list[int]:
        """The drafter's view of the committed tokens (the same last token: the root)."""
        if self.own_prompt is None:
            return context
        return self.own_prompt + context[self.target_prompt_len:]

    def _children(self, tree: DraftTree, parent: int, row: torch.Tensor, width: int) -> list[tuple[int, float, int]]:
        """(token, q(token), draws) for a parent's children: the top-`width` tokens, or one draw from q
        when sampling (a chain, whatever the width: see accept.sampling; q is kept on the tree)."""
        if self.sampler is None:
            top_p, top_t = torch.softmax(row.float(), dim=-1).topk(width)
            return [(t, p, 0) for p, t in zip(top_p.tolist(), top_t.tolist())]
        settings, noise = self.sampler
        q = sampling_probs(row, settings.temperature, settings.top_p)
        tree.draft_dists[parent] = q.float()
        token = noise.draw(q, self.root_position + tree.depths[parent] + 1)
        return [(token, float(q[token]), 1)]

    @torch.inference_mode()
    def propose(self, context: list[int], budget: int) -> DraftTree:
        self.forwards = 0
        self.root_position = len(context) - 1  # in the target's context: where the seed's noise is read
        surplus = self.cache.get_seq_length() - self.cached
        if surplus > 0:  # entries of a proposal that was never verified
            self.cache.crop(-surplus)
        context = self.own_context(context)
        row = self._feed(context[self.cached:])
        self.cached = base = len(context)
        tree = DraftTree(context[-1])
        self.slot = {ROOT: base - 1}
        if self.static_paths is not None:  # the static tree of rank paths (drafters.static_shape)
            self.tree = grow_static(tree, self.static_paths, row, int,
                                    lambda nodes: self._forward_level(tree, nodes), self.source)
            return self.tree
        path_prob = {ROOT: 1.0}
        level, rows = [ROOT], row[None]
        for depth in range(1, self.depth + 1):
            width = self.breadth if depth <= self.branch_levels else 1
            new_level = []
            for i, parent in enumerate(level):
                for token, p, draws in self._children(tree, parent, rows[i], width):
                    if tree.num_drafted >= budget:
                        break
                    extra = {"draws": draws} if draws else {}
                    child = tree.add(parent, token, self.source, score=path_prob[parent] * p, draft_prob=round(p, 6),
                                     bucket=f"d{'hi' if p >= 0.8 else 'mid' if p >= 0.4 else 'lo'}", prior=p, **extra)
                    path_prob[child] = path_prob[parent] * p
                    new_level.append(child)
            if depth == self.depth or not new_level or tree.num_drafted >= budget:
                break
            rows = self._forward_level(tree, new_level)
            level = new_level
        self.tree = tree
        return tree

    def _forward_level(self, tree: DraftTree, nodes: list[int]) -> torch.Tensor:
        """One draft forward over a level: node i sees the committed prefix and its ancestors' slots."""
        start = len(self.slot) + self.cached - 1   # slots already used: the prefix, then earlier levels
        total = start + len(nodes)
        visible = torch.zeros((len(nodes), total), dtype=torch.bool)
        visible[:, :self.cached] = True
        for i, node in enumerate(nodes):
            ancestor = tree.parents[node]
            while ancestor != ROOT:
                visible[i, self.slot[ancestor]] = True
                ancestor = tree.parents[ancestor]
            visible[i, start + i] = True
            self.slot[node] = start + i
        positions = [self.cached - 1 + tree.depths[n] for n in nodes]
        self.forwards += 1
        return masked_forward(self.lm, self.cache, [tree.tokens[n] for n in nodes], positions,
                              visible)[:, :self.vocab_size]

    def held_state(self) -> tuple:
        return (self.cache,)

    def checkpoint(self):
        return self.cached

    def rollback(self, saved) -> None:
        surplus = self.cache.get_seq_length() - saved
        if surplus > 0:
            self.cache.crop(-surplus)
        self.cached, self.tree, self.slot = saved, None, {}

    def observe(self, outcome: StepOutcome) -> None:
        """Keep the cache entries of the drafted nodes that were committed; drop the rest."""
        if self.tree is None:
            return
        base = self.cached
        kept, node = [], ROOT
        for token in self.own_context(outcome.context)[base:-1]:  # the new root is fed with the next proposal
            node = self.tree.child_with_token(node, token)
            if node is None or node not in self.slot:
                break
            kept.append(self.slot[node] - base)
        keep_accepted(self.cache, base, kept)
        self.cached = base + len(kept)
        self.tree, self.slot = None, {}


def draft_model_drafter(lm: LoadedModel, p: dict, draft: LoadedModel | None) -> DraftModelDrafter:
    """The `model` source for DRAFT_MODEL_PARAMS values p: the given draft model, or the target's own weights
    (self-speculation)."""
    return DraftModelDrafter(draft or lm, lm.vocab_size, p["draft_breadth"], p["branch_levels"], p["draft_depth"])
