"""Each paper's own configuration, one click away beside our tuned default, and what stays ours.

A PaperSettings holds the settings where the paper and our default differ (a method parameter, the tree
budget, the temperature or top-p), each with both values, the section it comes from and why we moved;
everything else is the same. Where the paper's mechanism is one specviz does not have (a dataset we
cannot ship, a drafter we train ourselves, a tree we merge), `ours` lists it with the paper's value beside
ours: the button cannot set those."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.lab.public_policy import Policy
from specviz.lab.visitor_request import VisitorRequest
from specviz.methods import AUTO_BUDGET, METHODS, Budget

PAPER_RUN_SETTINGS = ("budget", "temperature", "top_p")  # settings a click sets besides the method's parameters


@dataclass(frozen=True)
class Change:
    name: str          # a method parameter, or one of PAPER_RUN_SETTINGS
    paper: object      # the paper's value
    ours: object       # our default
    where: str         # the section (or code) the paper's value comes from
    why: str           # what our default buys


@dataclass(frozen=True)
class OwnChoice:
    """A departure the button cannot undo: the paper's mechanism or data is not specviz's."""
    what: str
    paper: str
    ours: str


@dataclass(frozen=True)
class PaperSettings:
    method: str
    paper: str                      # the paper and where the values come from
    changes: tuple[Change, ...]
    ours: tuple[OwnChoice, ...] = ()

    def values(self, which: str) -> dict[str, object]:
        """The settings of `which` ("paper" or "ours"): every changed name with its value."""
        return {c.name: (c.paper if which == "paper" else c.ours) for c in self.changes}

    def params(self, which: str) -> dict[str, object]:
        """values(which) without the run settings: the method's own parameters."""
        return {k: v for k, v in self.values(which).items() if k not in PAPER_RUN_SETTINGS}


_BUDGET_WHY = ("the planner keeps, every step, the nodes whose chance pays for their verify cost on this "
               "machine; a fixed budget verifies the whole offered tree")
_GREEDY = "greedy by default, as the paper evaluates"
# EAGLE-2 as its repository runs it (EaModel.from_pretrained: total_token=60, depth=5 levels after the
# root's, top_k=10): the tree ReSpec falls back to and READER's speculator is sized like
_EAGLE2_WHY = ("on a CPU a 60-node, 6-level head tree costs more than it brings: 24 nodes over 2 levels of "
               "4 x 4 measured fastest here (docs/benchmarks.md)")
_HEAD = OwnChoice("draft head", "EAGLE's published head (EAGLE-2 for ReSpec, EAGLE-3 for READER), trained with "
                  "0.1 x cross-entropy, uniform feature noise, lr 3e-5, 20 epochs",
                  "our own head for the shipped model (`python -m specviz train-head`): smooth-L1 + 0.5 x "
                  "cross-entropy, no feature noise, lr 1e-3, 3 epochs")

PAPERS = {s.method: s for s in [
    PaperSettings("racer", "RACER, *Loss & Training* (default hyperparameters: capacity 64, breadth 8, n-grams of 10, "
                           "10,000 nodes; greedy)", (
        Change("budget", Budget(64), AUTO_BUDGET, "default hyperparameters", _BUDGET_WHY),
        Change("warm_table", 0, 1, "Key Designs (the table fills from the context)", "the copy-logit table starts from the model's "
               "warm table instead of cold, so the first steps of a prompt draft too"),
        Change("draft_ahead", 0, 1, "Key Designs (matches in the context only)", "the automaton runs on its own draft past the matched n-gram, so a copy goes on"),
        Change("min_path_prob", 0.0, 0.01, "Key Designs (breadth-first, nothing cut)", "copy-logit nodes below 1% path probability are left "
               "out of the offer")), (
        OwnChoice("capacity of 64", "counts the root (63 draft tokens)", "64 draft nodes, the root apart"),
        OwnChoice("copy-logit rows never seen", "the official code drafts filler tokens", "they draft nothing"),
        OwnChoice("copy-logit rows", "from accepted tokens", "from every verified node, rejected ones too"))),
    PaperSettings("respec", "ReSpec §4.1 (greedy; draft size 60; lookback 3; EAGLE-2 with its defaults as the "
                            "model-based drafter), §3.2.1 (θ_entropy = 1.5) and §4.3 (τ ≤ 3 and m ≤ 3 recommended)", (
        Change("budget", Budget(60), AUTO_BUDGET, "§4.1 (draft size 60)", _BUDGET_WHY),
        Change("fallback", "model", "auto", "§4.1 (EAGLE-2 drafts when retrieval does not fire)",
               "auto falls back to whichever of the head and the copy-logit tree drafted more tokens per measured "
               "ms here"),
        Change("head_breadth", 10, 4, "EAGLE-2's top_k = 10", _EAGLE2_WHY),
        Change("head_expand", 10, 4, "EAGLE-2's top_k = 10 nodes expanded per level", _EAGLE2_WHY),
        Change("head_depth", 6, 2, "EAGLE-2's depth = 5 levels after the root's", _EAGLE2_WHY),
        Change("head_nodes", 60, 24, "EAGLE-2's total_token = 60", _EAGLE2_WHY),
        Change("tau", 3.0, 0.0, "§4.3 (recommended upper bound; the experiments' own τ is not given)",
               "strict verification: the output is exactly greedy decoding's (τ > 0 is lossy)"),
        Change("m", 3, 2, "§4.3 (recommended upper bound)", "a relaxed token needs two greedy matches after it, not "
               "three (only matters when τ > 0)")), (
        _HEAD,
        OwnChoice("α, θ_score, λ_e, branch length, Φ, top-k of the relaxed rule", "not given in the paper",
                  "0.3, 0.2, 0.5, 16, 2, 5 (our defaults)"),
        OwnChoice("equal key confidences", "the shorter key", "the longer key"),
        OwnChoice("match positions never tried", "(not specified)", "keep their score"),
        OwnChoice("relaxed verification", "along the retrieved path", "over the whole tree"),
        OwnChoice("fallback = auto", "(no such setting)", "its speed measurements are shared by the process, so a "
                  "lossy τ > 0 output can depend on what ran before"))),
    PaperSettings("reader", "READER §4.1 (the EAGLE-3 speculator's tree: depth 8, 60 tokens), Algorithm 2 "
                            "(RankByFrequency over the trie and the datastore), §4.2 (fixed shape, nothing pruned), "
                            "Table 2 (greedy)", (
        Change("budget", Budget(60), AUTO_BUDGET, "§4.1 (60 draft tokens)", _BUDGET_WHY),
        Change("head_breadth", 10, 4, "EAGLE-3's top_k = 10", _EAGLE2_WHY),
        Change("head_expand", 10, 4, "EAGLE-3's top_k = 10", _EAGLE2_WHY),
        Change("head_depth", 8, 2, "§4.1 (tree depth 8)", _EAGLE2_WHY),
        Change("head_nodes", 60, 24, "§4.1 (60 draft tokens)", _EAGLE2_WHY),
        Change("merge", "frequency", "longest", "Algorithm 2, line 5 (A ∪ B ranked by frequency)",
               "a longer match agrees more often than a larger count of a shorter one"),
        Change("min_path_share", 0.0, 0.02, "§4.2 (fixed shape)", "a searched branch stops where its path share "
               "falls below 2%")), (
        _HEAD,
        OwnChoice("the draft tree", "a static tree searched offline for the model and batch size (App. E, F)",
                  "the head's dynamic tree (EAGLE-2's rule); `python -m specviz` has no static tree search yet"),
        OwnChoice("the search branch", "attached beside the draft tree, same tokens not merged",
                  "merged into the tree by trie union (a duplicate node would be verified twice)"),
        OwnChoice("the long-term datastore", "Magpie (millions of responses, an 11 GB suffix array)",
                  "about 160 of the target's own answers, built here (`python -m specviz datastore`)"),
        OwnChoice("d_search, d_deep, the search key length", "not given (tree figures only)", "12, 6, 8 (our defaults)"),
        OwnChoice("KV-cache rearrangement", "every 25-50 steps at batch 16-32", "none (batch 1)"))),
    PaperSettings("rapid", "RAPID §3.1 (γ = 10; η searched in {5, 10, 20} for self-speculation; 512-token chunks, "
                           "BGE-M3 cosine ≥ 0.3, retrieval length between 4,096 tokens and 1/24 of the input), "
                           "Appendix C (temperature 1.0 on ∞Bench)", (
        Change("budget", Budget(10), AUTO_BUDGET, "§3.1 (γ = 10)", "the chain of γ sampled tokens reaches the verifier "
               "whole under the standard rule either way"),
        Change("eta", 10.0, 0.0, "§3.1 (η ∈ {5, 10, 20})", "η = 0 keeps the output on the target's own "
               "distribution (η > 0 is lossy)"),
        Change("temperature", 1.0, 0.0, "Appendix C (∞Bench)", "greedy by default; η needs a temperature"),
        Change("acceptance", "standard", "seeded", "§2.4 and Appendix B (speculative sampling's rule)",
               "the seeded rule gives every method ar's tokens for a seed (η > 0 uses the standard rule anyway)"),
        Change("retrieval_budget", 4096, 1024, "§3.1 (at least 4,096 tokens)", "our documents hold 2,000-8,000 "
               "tokens: at 4,096 the drafter reads most of them and retrieval drafts no faster than the target"),
        Change("compression", 24.0, 0.0, "§2.3 (|C^S| ≤ |C| / λ) and §3.1 (1/24)", "a fixed budget"),
        Change("ranker", "minilm", "bm25", "§3.1 (embedding cosine)", "BM25 found the evidence more often on our "
               "questions, and faster")), (
        OwnChoice("the embedder", "BGE-M3", "all-MiniLM-L6-v2 (what ships with specviz)"),
        OwnChoice("the RAG drafter", "the same or a larger model", "the target's own weights (self-speculation)"),
        OwnChoice("long contexts", "up to 128K tokens", "the shipped documents, a few thousand tokens"))),
]}


def paper_settings(method: str) -> PaperSettings | None:
    """The paper's configuration of a method (a RACER ablation takes RACER's); None for ar, pld, unified."""
    return PAPERS.get("racer" if method.startswith("racer") else method)


def paper_request(request: VisitorRequest, which: str, policy: Policy = Policy.private()) -> VisitorRequest:
    """The request with its method's configuration of `which` ("paper" or "ours"): every parameter of the method
    at our default, then the paper's values where `which` is "paper"; the budget auto, greedy, top-p 1 unless the
    paper says otherwise. Checked as an A/B side is (VisitorRequest.with_overrides): a paper's configuration that
    this method refuses raises SpecvizError."""
    spec = METHODS[request.settings.method]
    changes: dict[str, object] = {"budget": AUTO_BUDGET, "temperature": 0.0, "top_p": 1.0,
                                  **{p.name: p.default for p in spec.params}}
    settings = paper_settings(spec.name)
    if settings is not None:
        changes.update(settings.values(which))
    return request.with_overrides(changes, policy)


def paper_settings_markdown(method: str) -> str:
    """What our default changes from the paper, one line per setting, and what stays ours."""
    settings = paper_settings(method)
    if settings is None:
        return (f"**{method}** has no paper of its own here: its settings are ours." if method in ("ar", "unified", "pld")
                else "")
    lines = [f"**Paper**: {settings.paper}. **Our default changes**:"]
    for c in settings.changes:
        lines.append(f"- `{c.name}` {c.ours} (paper {c.paper}, {c.where}): {c.why}")
    if settings.ours:
        lines.append("**Ours either way** (the button cannot set these):")
        lines.extend(f"- {o.what}: {o.ours} (paper: {o.paper})" for o in settings.ours)
    return "\n".join(lines)
