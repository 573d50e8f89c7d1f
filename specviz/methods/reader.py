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
from specviz.records.paper import BUDGET_WHY, Change, EAGLE2_WHY, OUR_HEAD, OwnChoice, PaperSettings
from specviz.tree.budget import AUTO_BUDGET, Budget


# the paper's own configuration (the page's *Paper's settings* button) and what stays ours
READER_PAPER = PaperSettings("reader", "READER §4.1 (the EAGLE-3 speculator's tree: depth 8, 60 tokens), Algorithm 2 "
                        "(RankByFrequency over the trie and the datastore), §4.2 (fixed shape, nothing pruned), "
                        "Table 2 (greedy)", (
    Change("budget", Budget(60), AUTO_BUDGET, "§4.1 (60 draft tokens)", BUDGET_WHY),
    Change("head_breadth", 10, 4, "EAGLE-3's top_k = 10", EAGLE2_WHY),
    Change("head_expand", 10, 4, "EAGLE-3's top_k = 10", EAGLE2_WHY),
    Change("head_depth", 8, 2, "§4.1 (tree depth 8)", EAGLE2_WHY),
    Change("head_nodes", 60, 24, "§4.1 (60 draft tokens)", EAGLE2_WHY),
    Change("merge", "frequency", "longest", "Algorithm 2, line 5 (A ∪ B ranked by frequency)",
           "a longer match agrees more often than a larger count of a shorter one"),
    Change("min_path_share", 0.0, 0.02, "§4.2 (fixed shape)", "a searched branch stops where its path share "
           "falls below 2%")), (
    OUR_HEAD,
    OwnChoice("the draft tree", "a static tree searched offline for the model and batch size (App. E, F)",
              "the head's dynamic tree (EAGLE-2's rule); `python -m specviz` has no static tree search yet"),
    OwnChoice("the search branch", "attached beside the draft tree, same tokens not merged",
              "merged into the tree by trie union (a duplicate node would be verified twice)"),
    OwnChoice("the long-term datastore", "Magpie (millions of responses, an 11 GB suffix array)",
              "about 160 of the target's own answers, built here (`python -m specviz datastore`)"),
    OwnChoice("d_search, d_deep, the search key length", "not given (tree figures only)", "12, 6, 8 (our defaults)"),
    OwnChoice("KV-cache rearrangement", "every 25-50 steps at batch 16-32", "none (batch 1)")))


class Reader(Method):
    name = "reader"
    paper = READER_PAPER
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
        super().finish(output_ids)
        self.indexes.finish(output_ids)
