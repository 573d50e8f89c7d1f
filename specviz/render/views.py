"""What the page shows, as named structures: the presenters (render.session_view, render.compare_view) build them,
and the panels map each field to its widget by name (no positions to keep in step on either side)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class LabView:
    """The Tree tab and the lines above it, for the step on screen (the timeline's, or the newest)."""
    tree: str                     # HTML: the shown step's tree box (tree_svg.tree_html)
    text_html: str                # the generated text up to the shown step, each token marked by its origin
    counters: str                 # markdown: steps, tokens, MAT, tokens/s, speedup vs ar, timings
    budget_split: str             # markdown: per source offered / proposed / kept / accepted
    method_step: str              # markdown: ReSpec's trigger, READER's search, transfers (empty otherwise)
    token_diff_html: str          # the output against the lossless one ("" when identical or not lossy)
    prediction: object            # plotly figure: predicted against measured accepted drafts per step
    message: str                  # the last action's message (a warning starts with ⚠️)
    document_html: str            # rapid: the document with the chunks its drafter reads ("" otherwise)
    node_choices: list            # (label, node id) of the shown step's nodes, for the p / q / p_hat chart
    distribution: object          # plotly figure: p, q, p_hat at the first of node_choices
    steps: int                    # steps in the shown run
    shown_step: int | None        # index of the step on screen; None before the first
    caption: str                  # which step is on screen and why its tree is small when it is

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class AccountingView:
    """The Accounting tab up to the shown step."""
    sources: object       # nodes proposed / verified / accepted per source
    acceptance: object    # acceptance rate by depth and by source
    waste: object         # wasted verify tokens per step
    time_split: object    # draft / forward / acceptance / update per step
    lanes: object         # wall clock: this run against ar
    cost: object          # the verify cost curve and the shown step's expected speedup

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class CompareView:
    """The A/B tab: each side's last tree, text and summary, B's difference from A, the message."""
    tree_a: str          # HTML tree boxes (tree_svg.tree_html)
    tree_b: str
    text_a: str
    text_b: str
    summary_a: str
    summary_b: str
    diff_html: str
    message: str

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
