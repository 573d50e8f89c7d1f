"""READER (`reader`): the draft model's fixed-shape tree, widened by one deep branch searched in the
short-term trie + long-term datastore and deepened by a search seeded from the draft model's best prefix;
verified strictly (lossless)."""

from __future__ import annotations

from specviz.params import Param
from specviz.index.datastore import shared_datastore
from specviz.drafters.search_path import DeepenDrafter, SearchDrafter, SearchIndexes
from specviz.errors import SpecvizError
from specviz.methods.base import Method
from specviz.methods.respec import DRAFT_MODEL_PARAMS, draft_model_drafter

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
]


def search_indexes(lm, p: dict) -> SearchIndexes:
    """The trie, and the datastore when asked for and usable; otherwise the reason it is off."""
    if not p["datastore"]:
        return SearchIndexes(p["key_len"], None, "off (datastore = 0)")
    try:
        return SearchIndexes(p["key_len"], shared_datastore(lm), "on")
    except SpecvizError as error:
        return SearchIndexes(p["key_len"], None, f"off: {error}")


class Reader(Method):
    name = "reader"
    summary = ("READER: the draft model's tree, widened by one deep trie + datastore search branch and "
               "deepened by a search seeded with the draft model's best prefix")
    params = SEARCH_PARAMS + DRAFT_MODEL_PARAMS
    uses_draft_model = True

    def build(self, lm, p, draft):
        self.indexes = search_indexes(lm, p)
        stages = [draft_model_drafter(lm, p, draft), SearchDrafter(self.indexes, p["d_search"], p["min_path_share"])]
        if p["deepen"]:
            stages.append(DeepenDrafter(self.indexes, p["d_deep"], seed_depth=min(2, p["draft_depth"]),
                                        min_path_share=p["min_path_share"]))
        return stages

    @property
    def warnings(self) -> list[str]:
        state = self.indexes.datastore_state
        return [] if state == "on" or state.startswith("off (") else [f"Datastore branch {state}"]

    def finish(self, output_ids: list[int]) -> None:
        """A generation ended: grow the datastore with its answer when asked to."""
        if self.p["datastore_grow"] and self.indexes.datastore is not None:
            self.indexes.datastore.add(output_ids)
