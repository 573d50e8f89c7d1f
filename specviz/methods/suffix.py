"""SuffixDecoding (`suffix`; Oliaro et al., NeurIPS 2025 spotlight): model-free drafting from suffix tries of this
run's prompt and output and of the process's earlier answers, a tree scored by pattern frequency whose size grows
with the matched length (drafters/suffix.py). Strict verification: lossless. `unified` merges the same source with
`with_suffix=1`."""

from __future__ import annotations

from specviz.accept.sampling import ACCEPTANCE_PARAM
from specviz.drafters.suffix import SUFFIX_PARAMS, suffix_drafter
from specviz.methods.base import Method
from specviz.tree.budget import AUTO_BUDGET, Budget
from specviz.records.paper import BUDGET_WHY, Change, OwnChoice, PaperSettings

SUFFIX_PAPER = PaperSettings("suffix", "SuffixDecoding (Oliaro et al., NeurIPS 2025) §3 (per-request and global "
                                       "suffix trees, frequency-scored speculation trees, MAX_SPEC = α p), as vLLM's "
                                       "`suffix` method runs it (max_tree_depth 24, max_spec_factor 1, "
                                       "min_token_prob 0.1, max_cached_requests 10,000; greedy)", (
    Change("budget", Budget(24), AUTO_BUDGET, "vLLM: num_speculative_tokens defaults to the tree depth, 24",
           BUDGET_WHY),
    Change("suffix_history", 10_000, 1000, "vLLM's suffix_decoding_max_cached_requests",
           "a public Space keeps a bounded memory of its visitors' answers")), (
    OwnChoice("the suffix trees", "compressed suffix trees in C++ (ArcticInference)",
              "uncompressed depth-bounded tries in Python (a node per token)"),
    OwnChoice("the global tree", "every finished request of the server",
              "the finished runs of this process with the same model"),
    OwnChoice("hybrid drafting", "ArcticInference picks suffix or a model speculator per step by score",
              "`unified` merges the suffix source into its one tree (`with_suffix=1`) and the planner prunes it")))


class Suffix(Method):
    name = "suffix"
    paper = SUFFIX_PAPER
    summary = ("SuffixDecoding: suffix tries of prompt + output and of earlier answers draft the most frequent "
               "continuations, a larger tree the longer the match")
    params = SUFFIX_PARAMS + [ACCEPTANCE_PARAM]
    state_only = {"suffix_history": 0}  # the earlier answers are the process's memory
    mergeable = True

    @classmethod
    def sources(cls, lm, p):
        return [suffix_drafter(lm, p)]
