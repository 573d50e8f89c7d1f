"""READER's CPU-side search (`search` and `deepen` sources).

SearchPath (Algorithm 2) asks the short-term trie and the long-term datastore for the next-token counts after the
longest suffix of the query each holds, merges them (`merge`), appends the top token and goes on. `SearchDrafter`
widens (one branch at the root); `DeepenDrafter` (Algorithm 3) seeds a second search with the draft model's best
prefix. Ours: a branch stops where the product of its shares falls below `min_path_share`, since such tokens cost
the widest lookups and the planner almost never kept them.

Design notes: docs/design.md, "specviz/drafters/search_path.py".
"""

from __future__ import annotations

from specviz.records.notes import DeepenNote, SearchNote
from specviz.tree.draft_tree import ROOT, DraftTree
from specviz.drafters.base import Drafter
from specviz.errors import SpecvizError
from specviz.index.datastore import shared_datastore
from specviz.index.ngram_trie import NgramTrie
from specviz.params import Param

MATCH_EDGES = (1, 2, 3, 5, 8)   # matched lengths the planner learns apart

# READER's search parameters, as every method that drafts with it shows them
SEARCH_PARAMS = [
    Param("d_search", 12, 1, 64, int, "reader: depth of the widening branch searched at the root"),
    Param("d_deep", 6, 1, 64, int, "reader: depth of the deepening branch below the draft model's best prefix"),
    Param("min_path_share", 0.02, 0.0, 1.0, float, "reader: a searched branch stops before a token whose path "
                                                   "share (the shares of its tokens from the branch's top, "
                                                   "multiplied) would fall below this (0 = always full depth)"),
    Param("deepen", 1, 0, 1, int, "reader: 1 = deepen (seed a search with the draft model's prefix), 0 = off"),
    Param("key_len", 8, 1, 16, int, "reader: longest context suffix the trie and datastore are searched with"),
    Param("datastore", 1, 0, 1, int, "reader: 1 = search the long-term datastore too, 0 = the trie alone"),
    Param("datastore_grow", 0, 0, 1, int, "reader: 1 = add every finished answer to the datastore (off in "
                                           "benchmarks: a repeated prompt would copy its own earlier answer)"),
    Param("merge", "longest", 0, 0, str, "reader: how the trie's and the datastore's next-token counts merge: the "
                                         "longer match wins (longest), or both added (frequency, READER's Alg. 2)",
          choices=("longest", "frequency")),
]


def match_bucket(length: int, share: float) -> str:
    edge = max(e for e in MATCH_EDGES if e <= max(1, length))
    return f"k{edge}{'h' if share >= 0.5 else 'l'}"


class SearchIndexes:
    """The short-term trie (kept in step with the context) and the datastore, queried together."""

    def __init__(self, key_len: int = 8, datastore=None, datastore_state: str = "on", grow: bool = False,
                 merge: str = "longest"):
        self.key_len, self.merge = key_len, merge
        self.trie = NgramTrie(depth=key_len + 1)
        self.datastore = datastore
        self.datastore_state = datastore_state   # "on", or why the datastore branch is off
        self.grow = grow                         # whether a finished answer is added to the datastore

    @property
    def warnings(self) -> list[str]:
        """The datastore branch is off for a reason the user did not choose (a datastore = 0 is no news)."""
        state = self.datastore_state
        return [] if state == "on" or state.startswith("off (") else [f"Datastore branch {state}"]

    def finish(self, output_ids: list[int]) -> None:
        """A generation ended: grow the datastore with its answer when asked to."""
        if self.grow and self.datastore is not None:
            self.datastore.add(output_ids)

    def sync(self, context: list[int]) -> None:
        if self.trie.tokens_fed < len(context):
            self.trie.feed(context[self.trie.tokens_fed:])

    def search(self, query: list[int], depth: int, min_path_share: float = 0.0
               ) -> list[tuple[int, float, int, str, float]]:
        """Up to depth (token, share, matched length, which index, prior) along the best path after query; the path
        stops before a token that would bring the product of its shares below min_path_share. prior: the share
        smoothed as the automaton's are (count / (counted + 1): once out of once is 0.5, not certainty), the
        planner's estimate of the token's chance before it has measured any."""
        tail = list(query[-self.key_len:])
        arrays = self.datastore.indexes() if self.datastore is not None else []
        trie_match = self.trie.match(tail)
        array_matches = [index.match(tail, self.key_len) for index in arrays]
        path, reach = [], 1.0
        for _ in range(depth):
            longest = max([trie_match.length if trie_match is not None else 0]
                          + [found.length for found in array_matches if found is not None])
            if longest == 0:
                break
            # `longest`: only the indexes with the longest match are counted; `frequency`: every match
            counted = 1 if self.merge == "frequency" else longest
            merged, names = {}, set()
            if trie_match is not None and trie_match.length >= counted:
                merged, names = dict(self.trie.counts(trie_match)), {"trie"}
            for found, index in zip(array_matches, arrays):
                if found is not None and found.length >= counted:
                    names.add("datastore")
                    for token, count in index.counts(found).items():
                        merged[token] = merged.get(token, 0) + count
            top = max(merged.values())
            token = min(t for t, count in merged.items() if count == top)  # ties: the lowest token id
            share = top / sum(merged.values())
            reach *= share
            if reach < min_path_share:
                break
            path.append((token, share, longest, "+".join(sorted(names)), top / (sum(merged.values()) + 1)))
            tail = (tail + [token])[-self.key_len:]
            trie_match = self.trie.extend(trie_match, token, tail) if trie_match else self.trie.match(tail)
            array_matches = [index.extend(found, token, tail, self.key_len) if found else index.match(tail, self.key_len)
                             for found, index in zip(array_matches, arrays)]
        return path


def add_branch(tree: DraftTree, parent: int, found: list, source: str, budget: int) -> int:
    """Hang a searched branch below parent (within budget new nodes); returns the nodes it proposed."""
    proposed = 0
    for token, share, length, where, prior in found:
        if tree.child_with_token(parent, token) is None and budget <= 0:
            break
        if tree.child_with_token(parent, token) is None:
            budget -= 1
        parent = tree.add(parent, token, source, score=share, match=length, index=where,
                          bucket=match_bucket(length, share), prior=prior)
        proposed += 1
    return proposed


class SearchDrafter(Drafter):
    """Widening: one deep searched branch at the root."""
    source = "search"

    def __init__(self, indexes: SearchIndexes, depth: int, min_path_share: float = 0.0):
        self.indexes, self.depth, self.min_path_share = indexes, depth, min_path_share
        self.note: SearchNote | None = None

    def propose(self, context: list[int], budget: int) -> DraftTree:
        self.indexes.sync(context)
        tree = DraftTree(context[-1])
        found = self.indexes.search(context, min(self.depth, budget), self.min_path_share)
        add_branch(tree, ROOT, found, self.source, budget)
        self.note = SearchNote(tokens=len(found), matched=found[0][2] if found else 0,
                               index=found[0][3] if found else None, datastore=self.indexes.datastore_state)
        return tree

    def step_note(self) -> SearchNote | None:
        note, self.note = self.note, None
        return note


class DeepenDrafter(Drafter):
    """Deepening: a search seeded with the draft model's best prefix, hung below that prefix's node."""
    source = "deepen"

    def __init__(self, indexes: SearchIndexes, depth: int, seed_depth: int = 2, min_path_share: float = 0.0):
        self.indexes, self.depth, self.seed_depth, self.min_path_share = indexes, depth, seed_depth, min_path_share
        self.note: DeepenNote | None = None

    @staticmethod
    def seed_node(tree: DraftTree, seed_depth: int) -> int | None:
        """Algorithm 3: down the draft model's most probable children, to depth min(2, its depth)."""
        node = ROOT
        for _ in range(seed_depth):
            model_children = [c for c in tree.children(node) if "model" in tree.sources[c]]
            if not model_children:
                break
            node = max(model_children, key=lambda c: tree.meta[c]["model"].get("draft_prob", 0.0))
        return None if node == ROOT else node

    def extend(self, context: list[int], tree: DraftTree, budget: int) -> tuple[DraftTree, int]:
        node = self.seed_node(tree, self.seed_depth)
        if node is None:
            self.note = DeepenNote(seed=None, tokens=0)
            return tree, 0
        self.indexes.sync(context)
        prefix = [tree.tokens[n] for n in tree.path_to(node)]
        found = self.indexes.search(context + prefix, self.depth, self.min_path_share)
        proposed = add_branch(tree, node, found, self.source, budget)
        self.note = DeepenNote(seed=node, seed_depth=tree.depths[node], tokens=len(found))
        return tree, proposed

    def step_note(self) -> DeepenNote | None:
        note, self.note = self.note, None
        return note


def search_indexes(lm, p: dict) -> SearchIndexes:
    """The trie, and the datastore when SEARCH_PARAMS values p ask for it and it is usable; otherwise the
    reason it is off."""
    grow, merge = bool(p["datastore_grow"]), p.get("merge", "longest")
    if not p["datastore"]:
        return SearchIndexes(p["key_len"], None, "off (datastore = 0)", grow, merge)
    try:
        return SearchIndexes(p["key_len"], shared_datastore(lm), "on", grow, merge)
    except SpecvizError as error:
        return SearchIndexes(p["key_len"], None, f"off: {error}", grow, merge)


def search_drafters(indexes: SearchIndexes, p: dict) -> list[Drafter]:
    """READER's stages for SEARCH_PARAMS values p (draft_depth: the draft model's, which seeds deepening):
    the widening branch, then the deepening one when p['deepen']."""
    stages: list[Drafter] = [SearchDrafter(indexes, p["d_search"], p["min_path_share"])]
    if p["deepen"]:
        stages.append(DeepenDrafter(indexes, p["d_deep"], seed_depth=min(2, p["draft_depth"]),
                                    min_path_share=p["min_path_share"]))
    return stages
