"""ReSpec (`respec`): per step the entropy trigger chooses retrieval from feedback-scored match
positions (verified with relaxed acceptance at temperature 0) or a fallback drafter (a draft model or
the copy-logit tree, verified strictly). One source drafts each step."""

from __future__ import annotations

import torch

from specviz.accept.relaxed import relaxed_accept
from specviz.accept.sampling import ACCEPTANCE_PARAM
from specviz.params import Param
from specviz.drafters.copy_logits import LOGITS_PARAMS, copy_logit_drafter
from specviz.drafters.model_source import MODEL_PARAMS, draft_note, drafter_setting, model_drafter
from specviz.drafters.respec import ReSpecDrafter
from specviz.methods.base import Method
from specviz.runtime.verify_output import DeviceSummary
from specviz.records.paper import BUDGET_WHY, Change, EAGLE2_WHY, OUR_HEAD, OwnChoice, PaperSettings
from specviz.tree.budget import AUTO_BUDGET, Budget


# the paper's own configuration (the page's *Paper's settings* button) and what stays ours
RESPEC_PAPER = PaperSettings("respec", "ReSpec §4.1 (greedy; draft size 60; lookback 3; EAGLE-2 with its defaults as the "
                        "model-based drafter), §3.2.1 (θ_entropy = 1.5) and §4.3 (τ ≤ 3 and m ≤ 3 recommended)", (
    Change("budget", Budget(60), AUTO_BUDGET, "§4.1 (draft size 60)", BUDGET_WHY),
    Change("fallback", "model", "auto", "§4.1 (EAGLE-2 drafts when retrieval does not fire)",
           "auto falls back to whichever of the head and the copy-logit tree drafted more tokens per measured "
           "ms here"),
    Change("head_breadth", 10, 4, "EAGLE-2's top_k = 10", EAGLE2_WHY),
    Change("head_expand", 10, 4, "EAGLE-2's top_k = 10 nodes expanded per level", EAGLE2_WHY),
    Change("head_depth", 6, 2, "EAGLE-2's depth = 5 levels after the root's", EAGLE2_WHY),
    Change("head_nodes", 60, 24, "EAGLE-2's total_token = 60", EAGLE2_WHY),
    Change("tau", 3.0, 0.0, "§4.3 (recommended upper bound; the experiments' own τ is not given)",
           "strict verification: the output is exactly greedy decoding's (τ > 0 is lossy)"),
    Change("m", 3, 2, "§4.3 (recommended upper bound)", "a relaxed token needs two greedy matches after it, not "
           "three (only matters when τ > 0)")), (
    OUR_HEAD,
    OwnChoice("α, θ_score, λ_e, branch length, Φ, top-k of the relaxed rule", "not given in the paper",
              "0.3, 0.2, 0.5, 16, 2, 5 (our defaults)"),
    OwnChoice("equal key confidences", "the shorter key", "the longer key"),
    OwnChoice("match positions never tried", "(not specified)", "keep their score"),
    OwnChoice("relaxed verification", "along the retrieved path", "over the whole tree"),
    OwnChoice("fallback = auto", "(no such setting)", "its speed measurements are shared by the process, so a "
              "lossy τ > 0 output can depend on what ran before")))


class ReSpec(Method):
    name = "respec"
    paper = RESPEC_PAPER
    state_only = {"fallback": "model"}  # auto picks by speeds the process measured
    summary = ("ReSpec: entropy-triggered retrieval from feedback-scored match positions (relaxed "
               "verification), else a draft model or the copy-logit tree (strict)")
    params = [
        Param("entropy_threshold", 1.5, 0.0, 10.0, float, "respec: retrieve only if the key's mean entropy "
                                                        "H_min (nats) is at most this"),
        Param("lambda_e", 0.5, 0.0, 5.0, float, "respec: key length preference in C_k = H_k + lambda_e / k"),
        Param("lookback", 3, 1, 8, int, "respec: l, the longest key (suffix) the trigger considers"),
        Param("alpha", 0.3, 0.01, 1.0, float, "respec: EMA rate of the match-position scores"),
        Param("theta_score", 0.2, 0.0, 1.0, float, "respec: match positions scoring below this are skipped"),
        Param("branch_len", 16, 1, 64, int, "respec: tokens copied after each selected match position"),
        Param("tau", 0.0, 0.0, 10.0, float, "respec: relaxed verification margin log p(top1) - log p(x) "
                                             "for retrieved tokens (0 = lossless)"),
        Param("m", 2, 0, 8, int, "respec: greedy matches a relaxed token needs after it (look-ahead)"),
        Param("phi", 2, 0, 8, int, "respec: Phi, relaxed attempts per step"),
        Param("top_k", 5, 1, 100, int, "respec: a relaxed token must be in the target's top-k"),
        Param("fallback", "auto", 0, 0, str, "respec: drafter when retrieval does not fire: the draft model, the "
                                              "copy-logit tree, or auto (more tokens per measured ms)",
              choices=("auto", "model", "logits")),
    ] + MODEL_PARAMS + LOGITS_PARAMS + [ACCEPTANCE_PARAM]
    uses_draft_model = True

    @classmethod
    def lossless(cls, params: dict, temperature: float) -> bool:
        # relaxed acceptance is a greedy-decoding rule; sampling stays lossless speculative sampling
        return temperature > 0 or float(params["tau"]) <= 0 or int(params["phi"]) <= 0

    def build(self, lm, p, draft):
        model = model_drafter(lm, p, draft, (self.sampling, self.noise)) if p["fallback"] != "logits" else None
        self.notes = draft_note(draft) if p["fallback"] != "logits" else []
        return [ReSpecDrafter(p, model, drafter_setting(lm, draft, p), copy_logit_drafter(lm, p))]

    @property
    def warnings(self) -> list[str]:
        return list(self.notes)

    def accept(self, tree, logits: torch.Tensor, sampling, generator: torch.Generator, root_position: int,
               summary: DeviceSummary | None = None):
        if not sampling.greedy:
            return super().accept(tree, logits, sampling, generator, root_position, summary)
        # the entropy trigger reads the committed rows' entropies: the native pass gives them for free
        chosen = self.param_values
        return relaxed_accept(tree, logits, chosen["top_k"], chosen["tau"], chosen["m"], chosen["phi"], entropies=True,
                              summary=summary)
