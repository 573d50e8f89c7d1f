"""READER (`reader`): the draft model's fixed-shape tree, widened by one deep branch searched in the
short-term trie + long-term datastore and deepened by a search seeded from the draft model's best prefix;
verified strictly (lossless)."""

from __future__ import annotations

from specviz.drafters.draft_model import DRAFT_MODEL_PARAMS, draft_model_drafter
from specviz.drafters.search_path import SEARCH_PARAMS, search_drafters, search_indexes
from specviz.methods.base import Method


class Reader(Method):
    name = "reader"
    summary = ("READER: the draft model's tree, widened by one deep trie + datastore search branch and "
               "deepened by a search seeded with the draft model's best prefix")
    params = SEARCH_PARAMS + DRAFT_MODEL_PARAMS
    uses_draft_model = True

    def build(self, lm, p, draft):
        self.indexes = search_indexes(lm, p)
        return [draft_model_drafter(lm, p, draft), *search_drafters(self.indexes, p)]

    @property
    def warnings(self) -> list[str]:
        return self.indexes.warnings

    def finish(self, output_ids: list[int]) -> None:
        self.indexes.finish(output_ids)
