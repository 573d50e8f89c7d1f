"""Each paper's own configuration, one click away beside our tuned default, and what our default changes.

A PaperSettings holds the settings where the paper and our default differ (a method parameter, the tree
budget or the temperature), each with both values and why we moved; everything else is the same."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.methods import METHODS

AUTO = "auto"


@dataclass(frozen=True)
class Change:
    name: str          # a method parameter, or "budget" / "temperature"
    paper: object      # the paper's value
    ours: object       # our default
    why: str           # what our default buys


@dataclass(frozen=True)
class PaperSettings:
    method: str
    paper: str         # the paper and where the values come from
    changes: tuple[Change, ...]

    def values(self, which: str) -> dict[str, object]:
        """The settings of `which` ("paper" or "ours"): every changed name with its value."""
        return {c.name: (c.paper if which == "paper" else c.ours) for c in self.changes}

    def params(self, which: str) -> dict[str, object]:
        """values(which) without budget and temperature: the method's own parameters."""
        return {k: v for k, v in self.values(which).items() if k not in ("budget", "temperature")}


_BUDGET_WHY = ("the planner keeps, every step, the nodes whose chance pays for their verify cost on this "
               "machine (READER's Theorem 1); a fixed budget verifies the whole offered tree")
PAPERS = {s.method: s for s in [
    PaperSettings("racer", "RACER §4 (default hyperparameters: capacity 64, breadth 8, n-grams of 10, 10,000 nodes)", (
        Change("budget", 64, AUTO, _BUDGET_WHY),
        Change("warm_table", 0, 1, "the copy-logit table starts from the model's warm table instead of cold, so the "
                                   "first steps of a prompt draft too"),
        Change("draft_ahead", 0, 1, "the automaton runs on its own draft past the matched n-gram, so a copy goes on"),
        Change("min_path_prob", 0.0, 0.01, "copy-logit nodes below 1% path probability are left out of the offer"))),
    PaperSettings("respec", "ReSpec §4.4 (τ ≤ 3 and m ≤ 3 recommended; draft size 60)", (
        Change("budget", 60, AUTO, _BUDGET_WHY),
        Change("tau", 3.0, 0.0, "strict verification: the output is exactly greedy decoding's (τ > 0 is lossy)"),
        Change("m", 3, 2, "a relaxed token needs two greedy matches after it, not three (only matters when τ > 0)"))),
    PaperSettings("reader", "READER §3 (a fixed-shape tree: the draft model's tree, one widening and one deepening "
                            "branch, nothing pruned)", (
        Change("budget", 64, AUTO, _BUDGET_WHY),
        Change("min_path_share", 0.0, 0.02, "a searched branch stops where its path share falls below 2%"))),
    PaperSettings("rapid", "RAPID §3.1 (γ = 10; η searched in {5, 10, 20} for self-speculation; temperature 1.0 on "
                           "∞Bench; chunks ranked by embedding cosine ≥ 0.3)", (
        Change("budget", 10, AUTO, "the chain of γ sampled tokens reaches the verifier whole either way"),
        Change("eta", 10.0, 0.0, "η = 0 keeps the output on the target's own distribution (η > 0 is lossy, see below)"),
        Change("temperature", 1.0, 0.0, "greedy by default; η needs a temperature"),
        Change("ranker", "minilm", "bm25", "BM25 found the evidence more often on our questions, and faster"))),
]}


def paper_settings(method: str) -> PaperSettings | None:
    """The paper's configuration of a method (a RACER ablation takes RACER's); None for ar, pld, unified."""
    return PAPERS.get("racer" if method.startswith("racer") else method)


def widget_values(method: str, which: str, defaults: dict[str, object]) -> dict[str, object]:
    """Every setting a click sets: the method's parameters (the paper's or our defaults), budget and
    temperature. defaults: each parameter's default by name."""
    spec = METHODS.get(method)
    own = {p.name for p in spec.params} if spec else set()
    values: dict[str, object] = {"budget": AUTO, "temperature": 0.0}
    values.update({name: value for name, value in defaults.items() if name in own})
    settings = paper_settings(method)
    if settings is not None:
        values.update({k: v for k, v in settings.values(which).items() if k in own or k in ("budget", "temperature")})
    return values


def paper_settings_markdown(method: str) -> str:
    """What our default changes from the paper, one line per setting."""
    settings = paper_settings(method)
    if settings is None:
        return (f"**{method}** has no paper of its own here: its settings are ours." if method in ("ar", "unified", "pld")
                else "")
    lines = [f"**Paper**: {settings.paper}. **Our default changes**:"]
    for c in settings.changes:
        lines.append(f"- `{c.name}` {c.ours} (paper {c.paper}): {c.why}")
    return "\n".join(lines)
