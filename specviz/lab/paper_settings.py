"""Each paper's own configuration, one click away beside our tuned default, and what stays ours. The
configurations are data on the methods (Method.paper, records.paper): a new method brings its own, and one
without a paper says so."""

from __future__ import annotations

from specviz.lab.public_policy import Policy
from specviz.lab.visitor_request import VisitorRequest
from specviz.methods import METHODS
from specviz.tree.budget import AUTO_BUDGET
from specviz.records.paper import PaperSettings

# each paper once, by the method it belongs to (an ablation shares its parent's)
PAPERS = {m.paper.method: m.paper for m in METHODS.values() if m.paper is not None}


def paper_settings(method: str) -> PaperSettings | None:
    """The paper's configuration of a method (a RACER ablation takes RACER's); None for a method of ours."""
    return METHODS[method].paper if method in METHODS else None


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
        return f"**{method}** has no paper of its own here: its settings are ours." if method in METHODS else ""
    lines = [f"**Paper**: {settings.paper}. **Our default changes**:"]
    for c in settings.changes:
        lines.append(f"- `{c.name}` {c.ours} (paper {c.paper}, {c.where}): {c.why}")
    if settings.ours:
        lines.append("**Ours either way** (the button cannot set these):")
        lines.extend(f"- {o.what}: {o.ours} (paper: {o.paper})" for o in settings.ours)
    return "\n".join(lines)
