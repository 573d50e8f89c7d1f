"""The A/B tab's view: each side's last tree, text and summary line, and B's tokens against A's."""

from __future__ import annotations

from specviz.engine.session import Session
from specviz.engine.token_diff import TokenDiff, token_diff
from specviz.render.step_panels import token_diff_html, tokens_html
from specviz.render.tree_svg import tree_html
from specviz.render.views import CompareView


def side_summary(session: Session | None, side: str) -> str:
    """One side's line: method, parameters, budget, temperature, draft model and its figures so far."""
    if session is None:
        return f"**{side}**: not started"
    stats = session.stats()
    params = ", ".join(f"{k}={v}" for k, v in sorted(session.params.items())) or "no parameters"
    draft = getattr(session.draft, "name", None) or "self"   # a head, a model, or None: the target's own weights
    return (f"**{side}: {session.name}** ({params}; budget {session.budget}; "
            f"temperature {session.temperature:g}; draft model {draft}) · **steps** {stats.steps} · "
            f"**tokens** {stats.new_tokens} · "
            f"**MAT** {stats.mean_accepted:.2f} · **tokens/s** {stats.tokens_per_s:.1f} · "
            f"{'lossless' if session.lossless else 'lossy'}")


def sides_diff(a: Session | None, b: Session | None) -> TokenDiff | None:
    """The two outputs' difference over their common length (None before both have output)."""
    if a is None or b is None or not a.output_ids or not b.output_ids:
        return None
    n = min(len(a.output_ids), len(b.output_ids))
    return token_diff(a.output_ids[:n], b.output_ids[:n])


def compare_view(a: Session | None, b: Session | None, message: str) -> CompareView:
    """Both sides' last trees, texts and summaries, B's difference from A, the message."""
    shown = []
    for session in (a, b):
        records = session.records if session else []
        token_text = session.token_text if session else str
        tree = tree_html(records[-1] if records else None, token_text, run="live" if session else "",
                         steps=len(records))
        shown.append((tree, tokens_html(records, token_text)))
    diff = sides_diff(a, b)
    # struck through: A's tokens; highlighted: what B emitted instead
    diff_html = "" if diff is None else token_diff_html(diff, a.token_text, reference="side A")
    return CompareView(tree_a=shown[0][0], tree_b=shown[1][0], text_a=shown[0][1], text_b=shown[1][1],
                       summary_a=side_summary(a, "A"), summary_b=side_summary(b, "B"), diff_html=diff_html,
                       message=message)
