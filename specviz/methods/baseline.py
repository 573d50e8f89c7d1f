"""The baselines: plain decoding (`ar`) and prompt lookup (`pld`)."""

from __future__ import annotations

from specviz.accept.sampling import ACCEPTANCE_PARAM
from specviz.params import Param
from specviz.drafters.prompt_lookup import PromptLookupDrafter
from specviz.errors import SpecvizError
from specviz.methods.base import Method


class PlainDecoding(Method):
    name = "ar"
    summary = "plain greedy / sampled decoding: one target forward per token (the baseline)"


class PromptLookup(Method):
    name = "pld"
    summary = "prompt lookup: the trailing n-gram's last earlier occurrence drafts one chain"
    params = [
        Param("max_ngram", 3, 1, 10, int, "longest suffix n-gram looked up in prompt + output"),
        Param("min_ngram", 1, 1, 10, int, "shortest n-gram tried before giving up"),
        Param("num_pred_tokens", 10, 1, 64, int, "tokens drafted after a match"),
        ACCEPTANCE_PARAM,
    ]

    @classmethod
    def check(cls, values: dict) -> None:
        if values["min_ngram"] > values["max_ngram"]:
            raise SpecvizError(f"min_ngram ({values['min_ngram']}) must not exceed max_ngram ({values['max_ngram']}).")

    def build(self, lm, p, draft):
        return [PromptLookupDrafter(p["max_ngram"], p["min_ngram"], p["num_pred_tokens"])]
