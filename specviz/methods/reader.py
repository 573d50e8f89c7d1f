"""READER (`reader`): the draft model's fixed-shape tree, widened by one deep branch searched in the
short-term trie + long-term datastore and deepened by a search seeded from the draft model's best prefix;
verified strictly (lossless)."""

from __future__ import annotations

from specviz.accept.sampling import ACCEPTANCE_PARAM
from specviz.drafters.copy_logits import LOGITS_PARAMS, copy_logit_drafter
from specviz.drafters.model_source import MODEL_PARAMS, draft_note, model_drafter
from specviz.drafters.search_path import SEARCH_PARAMS, search_drafters, search_indexes
from specviz.methods.base import Method
from specviz.params import resolve


class Reader(Method):
    name = "reader"
    summary = ("READER: the draft model's tree, widened by one deep trie + datastore search branch and "
               "deepened by a search seeded with the draft model's best prefix")
    params = SEARCH_PARAMS + MODEL_PARAMS + [ACCEPTANCE_PARAM]
    uses_draft_model = True

    def build(self, lm, p, draft):
        self.indexes = search_indexes(lm, p)
        self.notes = draft_note(draft)
        # a head that cannot draft: the copy-logit tree (its default shape) takes the model tree's place
        model = model_drafter(lm, p, draft, (self.sampling, self.noise)) or copy_logit_drafter(lm, resolve(LOGITS_PARAMS, {}, self.name))
        return [model, *search_drafters(self.indexes, p)]

    @property
    def warnings(self) -> list[str]:
        return self.notes + self.indexes.warnings

    def finish(self, output_ids: list[int]) -> None:
        self.indexes.finish(output_ids)
