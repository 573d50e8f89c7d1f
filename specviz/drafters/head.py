"""The `model` source from a draft head (ours, runtime.draft_head, or a published EAGLE head, runtime.eagle_head):
a dynamic tree grown by cumulative chance over the target's own features, as EAGLE-2 grows it.

The head keeps a KV cache of its layer for the committed context, every entry from the target's true features. A
proposal feeds what the cache lacks, then expands the `head_expand` best nodes of each level by path chance, each
getting its top-`head_breadth` children, for up to `head_depth` levels, and cuts the tree to `head_nodes` and the
budget by path chance. After verification every draft entry leaves the cache. Sampled, a node's first child is q's
draw with the seed's noise.

Design notes: docs/design.md, "specviz/drafters/head.py".
"""

from __future__ import annotations

import time

import torch

from specviz.accept.position_noise import PositionNoise
from specviz.accept.sampling import SEEDED, SamplingSettings, sampling_probs
from specviz.drafters.base import Drafter, StepOutcome
from specviz.drafters.static_shape import grow_static, token_ranks
from specviz.params import Param
from specviz.runtime import state_pickle
from specviz.runtime.draft_head import DraftHead
from specviz.runtime.eagle_head import EagleHead
from specviz.tree.draft_tree import ROOT, DraftTree

FEED_CHUNK = 512
MIN_PATH_CHANCE = 0.02  # a level whose best node's path chance is below this is not expanded further

HEAD_PARAMS = [
    Param("head_breadth", 4, 1, 16, int, "draft head: children of each expanded node (its top-k)"),
    Param("head_expand", 4, 1, 16, int, "draft head: nodes of each level expanded, the best by path chance "
                                        "(EAGLE-2's dynamic tree)"),
    # 2, not EAGLE-2's deeper trees: on a CPU a third level costs more than it brings (docs/benchmarks.md)
    Param("head_depth", 2, 1, 16, int, "draft head: levels drafted (one head forward each)"),
    Param("head_nodes", 24, 1, 256, int, "draft head: nodes it offers, the best by path chance (EAGLE-2's "
                                         "reranking; the rest of the budget is left to the other sources)"),
]


def draft_bucket(prob: float) -> str:
    """The planner's bucket for a model node by its draft probability (as the draft-model drafter's)."""
    return f"d{'hi' if prob >= 0.8 else 'mid' if prob >= 0.4 else 'lo'}"


class HeadDrafter(Drafter):
    source = "model"
    needs_features = True

    def __init__(self, head: "DraftHead | EagleHead", breadth: int = 4, expand: int = 4, depth: int = 3, nodes: int = 24,
                 sampler: tuple[SamplingSettings, PositionNoise] | None = None, draw_first: bool = True):
        """draw_first: at T > 0, a node's first child is q's draw with the seed's noise (the seeded rule);
        False: its top-`breadth` tokens under q at T, as EAGLE-2 drafts (the standard rule: a fixed
        proposal may be cut or ranked freely, a draw may not)."""
        self.head = head
        self.feature_tap = head.feature_tap  # the target's hidden states it reads (EAGLE-3: three fused layers)
        self.breadth, self.expand, self.depth, self.nodes = breadth, expand, depth, nodes
        self.sampler = sampler if sampler is not None and not sampler[0].greedy else None
        self.draw_first = draw_first
        self.cache = head.new_cache()
        self.upto = 1          # context positions 1 .. upto - 1 have their entries in the cache (none for 0)
        self.known = 0         # context positions 0 .. known - 1 have their target features ...
        self.pending = torch.empty(0, head.feature_width)  # ... of which these, from position upto - 1 on
        self.missed = False    # a step came without the target's features: the head cannot draft
        self.min_path_chance = MIN_PATH_CHANCE
        self.forward_ms: list[float] = []  # each head forward of the last proposal (feed first)
        self.static_paths: list[tuple[int, ...]] | None = None  # a static tree of rank paths to draft instead

    # ---- the target's features --------------------------------------------------------------------
    def _add_features(self, start: int, features: torch.Tensor | None) -> None:
        if features is None or start != self.known:
            self.missed = True
            return
        self.pending = torch.cat([self.pending, features.detach().float().cpu()])
        self.known += features.shape[0]

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor,
                      features: torch.Tensor | None = None) -> None:
        self._add_features(start, features)

    def refill(self, context: list[int], start: int, features: torch.Tensor) -> None:
        self._add_features(start, features)

    def __getstate__(self):
        """Carried without caches (runtime.state_pickle): an empty cache and no features; the session's rebuild
        refills the features (refill) and the next proposal feeds the head from them, as after the prompt."""
        state = dict(self.__dict__)
        if not state_pickle.caches_travel():
            state.update(cache=self.head.new_cache(), upto=1, known=0, pending=self.pending[:0])
        return state

    def observe(self, outcome: StepOutcome) -> None:
        """The features of the root and of the accepted nodes whose successors were committed; every draft
        entry leaves the cache (the accepted ones come back with the target's features)."""
        new = len(outcome.context) - 1 - self.known
        if new > 0:
            rows = ([ROOT] + outcome.verification.path)[:new]
            features = outcome.features
            self._add_features(self.known, None if features is None else features[rows])
        self._crop(self.upto - 1)

    def held_state(self) -> tuple:
        return self.cache, self.pending

    def checkpoint(self):
        return self.upto, self.known, self.pending, self.missed

    def rollback(self, saved) -> None:
        self.upto, self.known, self.pending, self.missed = saved
        self._crop(self.upto - 1)

    def _crop(self, entries: int) -> None:
        surplus = self.cache.get_seq_length() - entries
        if surplus > 0:
            self.cache.crop(-surplus)

    # ---- drafting -----------------------------------------------------------------------------------
    def _run(self, features: torch.Tensor, tokens: list[int], positions: list[int], visible: torch.Tensor):
        started = time.perf_counter()
        out = self.head.forward(features, tokens, positions, visible, self.cache)
        self.forward_ms.append((time.perf_counter() - started) * 1000)
        return out

    def _feed(self, context: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Head entries for positions upto .. len(context) - 1 from the target's features; the last row's
        logits and predicted feature (the root's)."""
        end = len(context)
        self.upto = min(self.upto, end - 1)  # the root is always fed: its row drafts the first level
        self._crop(self.upto - 1)
        logits = feature = None
        for first in range(self.upto, end, FEED_CHUNK):
            last = min(first + FEED_CHUNK, end)
            past = first - 1
            offset = (first - 1) - (self.known - len(self.pending))  # row of F[first - 1] in pending
            rows = self.pending[offset:offset + last - first]
            visible = torch.ones((last - first, past + last - first), dtype=torch.bool).tril(past)
            logits, feature = self._run(rows, context[first:last], list(range(first, last)), visible)
        self.upto = end
        # keep F[root - 1] on: a proposal made again for the same context feeds the root again
        self.pending = self.pending[-(self.known - (end - 2)):]
        return logits[-1], feature[-1]

    def _children(self, tree: DraftTree, parent: int, row: torch.Tensor, position: int) -> list[tuple[int, float, float]]:
        """(token, q(token), rank score) of a parent's children from its logits over the draft vocabulary;
        position: the children's in the target's context (where the seed's noise is read)."""
        draft_ids = self.head.draft_ids_list
        if self.sampler is None:
            top_q, top_i = torch.softmax(row.float(), dim=-1).topk(min(self.breadth, row.shape[-1]))
            return [(draft_ids[i], q, q) for q, i in zip(top_q.tolist(), top_i.tolist())]
        settings, noise = self.sampler
        q = sampling_probs(row, settings.temperature, settings.top_p)
        ids = self.head.draft_ids_cpu
        tree.draft_dists[parent] = torch.zeros(self.head.lm.vocab_size).index_put_((ids,), q.float())
        if not self.draw_first:
            top_q, top_i = q.topk(min(self.breadth, q.shape[-1]))
            return [(draft_ids[i], p, p) for p, i in zip(top_q.tolist(), top_i.tolist())]
        # noise.draw over the whole vocabulary, where q is 0 outside the draft vocabulary: the same token
        drawn = draft_ids[int(torch.argmax(torch.log(q) + noise.gumbel(position, self.head.lm.vocab_size)[ids]))]
        best = float(q.max())
        top_q, top_i = q.topk(min(self.breadth, q.shape[-1]))
        children = [(drawn, float(q[self.head.draft_index[drawn]]), best)]
        children += [(draft_ids[i], p, p) for p, i in zip(top_q.tolist(), top_i.tolist()) if draft_ids[i] != drawn]
        return children[:self.breadth]

    @torch.inference_mode()
    def propose(self, context: list[int], budget: int) -> DraftTree:
        self.forward_ms = []
        tree = DraftTree(context[-1])
        if self.missed or self.known < len(context) - 1 or budget <= 0 or len(context) < 2:
            return tree
        if self.static_paths is not None:
            return self._propose_static(tree, context)
        root_logits, root_feature = self._feed(context)
        committed = self.cache.get_seq_length()       # entries of positions 1 .. root
        root_position = len(context) - 1
        chance = {ROOT: 1.0}
        slot, feature_of = {ROOT: committed - 1}, {ROOT: root_feature}
        expanded, rows = [ROOT], root_logits[None]
        for depth in range(1, self.depth + 1):
            level = []
            for parent, row in zip(expanded, rows):
                for token, p, rank in self._children(tree, parent, row, root_position + depth):
                    path = chance[parent] * rank
                    child = tree.add(parent, token, self.source, score=path, draft_prob=round(p, 6),
                                     bucket=draft_bucket(p), prior=p)
                    chance[child] = path
                    level.append(child)
            if depth == self.depth or not level:
                break
            expanded = sorted(level, key=lambda n: -chance[n])[:self.expand]
            if chance[expanded[0]] < self.min_path_chance:
                break
            rows = self._level(tree, expanded, slot, feature_of, committed, root_position)
        order = sorted(range(1, len(tree)), key=lambda n: (-chance[n], tree.depths[n], n))
        return tree.truncate(min(budget, self.nodes), order)

    def _propose_static(self, tree: DraftTree, context: list[int]) -> DraftTree:
        """The static tree of rank paths under the head (drafters.static_shape); one head forward per level
        over the nodes that have children in it."""
        row, feature = self._feed(context)
        committed, root_position = self.cache.get_seq_length(), len(context) - 1
        slot, feature_of = {ROOT: committed - 1}, {ROOT: feature}
        draft_ids = self.head.draft_ids_list
        return grow_static(tree, self.static_paths, row, lambda column: draft_ids[column],
                           lambda nodes: self._level(tree, nodes, slot, feature_of, committed, root_position),
                           self.source)

    @torch.inference_mode()
    def ranks_along(self, context: list[int], upcoming: list[int], depth: int) -> list[int]:
        """The rank under the head of each of the upcoming tokens, level by level, with the head drafting along
        them (teacher-forced: each level reads its parent's predicted feature and the true token, as a draft
        tree's node on the true path does); -1 for a token outside the draft vocabulary. What a static tree's
        acceptance by rank is measured from (studies.rank_acceptance)."""
        self.forward_ms = []
        if self.missed or self.known < len(context) - 1 or len(context) < 2:
            return []
        row, feature = self._feed(context)
        committed, root_position = self.cache.get_seq_length(), len(context) - 1
        tree = DraftTree(context[-1])
        slot, feature_of, node = {ROOT: committed - 1}, {ROOT: feature}, ROOT
        ranks: list[int] = []
        levels = min(depth, len(upcoming))
        for level, token in enumerate(upcoming[:levels]):
            index = self.head.draft_index.get(token)
            if index is None:
                ranks.append(-1)
                break
            ranks.append(token_ranks(row[None], torch.tensor([index], device=row.device))[0])
            if level + 1 == levels:
                break
            node = tree.add(node, token, self.source)
            row = self._level(tree, [node], slot, feature_of, committed, root_position)[0]
        return ranks

    def _level(self, tree: DraftTree, nodes: list[int], slot: dict, feature_of: dict, committed: int,
               root_position: int) -> torch.Tensor:
        """One head forward over nodes of one level: each reads its parent's predicted feature and sees the
        committed entries and its ancestors' draft entries. Returns their logits; keeps their features."""
        start = self.cache.get_seq_length()
        visible = torch.zeros((len(nodes), start + len(nodes)), dtype=torch.bool)
        visible[:, :committed] = True
        for i, node in enumerate(nodes):
            ancestor = tree.parents[node]
            while ancestor != ROOT:
                visible[i, slot[ancestor]] = True
                ancestor = tree.parents[ancestor]
            visible[i, start + i] = True
            slot[node] = start + i
        parents = torch.stack([feature_of[tree.parents[n]] for n in nodes])
        logits, features = self._run(parents, [tree.tokens[n] for n in nodes],
                                     [root_position + tree.depths[n] for n in nodes], visible)
        for i, node in enumerate(nodes):
            feature_of[node] = features[i]
        return logits


def head_drafter(head: "DraftHead | EagleHead", p: dict, sampler: tuple[SamplingSettings, PositionNoise] | None = None
                 ) -> HeadDrafter:
    """The head's drafter for HEAD_PARAMS values p (and the method's acceptance rule, where it has one);
    sampler: the run's sampling and the seed's noise."""
    return HeadDrafter(head, p["head_breadth"], p["head_expand"], p["head_depth"], p["head_nodes"], sampler,
                       draw_first=p.get("acceptance", SEEDED) == SEEDED)
