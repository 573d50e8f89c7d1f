"""What the app draws beside the tree (tree_svg draws the tree): the generated text marked by origin (HTML),
the step's panels (budget split, ReSpec's and READER's decisions), the token diff, and the sampling and
prediction charts (plotly)."""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go

from specviz.engine.prediction import PredictionError, accepted_at_least, own_spread
from specviz.tree import sources
from specviz.records.plan import PlanDecision
from specviz.records.notes import DeepenNote, MeasuredChoice, ModelStageNote, ReSpecNote, SearchNote
from specviz.records.status import BENT_STATUSES, NodeStatus
from specviz.records.step import CommitOrigin, StepRecord
from specviz.render.markdown_text import md_code, md_text
from specviz.render.tree_view import COMMIT_AT, visible_token

# the marks of committed tokens that are not sources (Okabe-Ito's remaining colours): several sources, the
# target's bonus token, and the statuses accepted by a rule that bends p
MARK_COLOURS = {"several": "#999999", "bonus": "#000000", NodeStatus.RELAXED: "#F0E442", NodeStatus.TRANSFERRED: "#56B4E9"}
# and their underline, so that a token's origin never rests on colour alone: per source family, then marks
UNDERLINES = {"logits": "solid", "retrieval": "dashed", "model": "dotted", "several": "groove", "bonus": "solid",
              NodeStatus.RELAXED: "double", NodeStatus.TRANSFERRED: "double"}


def colour_of(name: str) -> str:
    return sources.colour(name) if sources.is_source(name) else MARK_COLOURS[name]


def origin_class(origin: CommitOrigin) -> str:
    """CSS class of a committed token: bonus, relaxed (a retrieved token the relaxed rule accepted),
    transferred (a draft RAPID's p_hat accepted where p would have refused it), its source, or several."""
    if origin.bonus:
        return "bonus"
    if origin.mark in BENT_STATUSES:
        return str(NodeStatus(origin.mark))
    if len(origin.sources) > 1:
        return "several"
    source = origin.sources[0]
    return source if re.fullmatch(r"[\w-]+", source) else "other"  # a class name: a trace's text never more


def tokens_html(records: list[StepRecord], token_text, prompt: str = "", recorded: bool = False,
                animate_last: bool = False) -> str:
    """The prompt (marked when the run is a recording), then the generated text, each token marked by how it
    was produced (colour and underline; hover names it), every token HTML-escaped. animate_last: the last
    step's tokens appear at the step animation's commit phase. What is drawn is bounded whatever the run holds:
    the newest MAX_SHOWN_TOKENS tokens and MAX_SHOWN_TEXT characters of their text, the prompt's first
    MAX_SHOWN_PROMPT characters, each cut said on the page."""
    shown, skipped = _newest_tokens(records, token_text)
    spans = []
    for index, record, k, token, origin in shown:
        new = animate_last and record is records[-1]
        css = origin_class(origin) + (" tok-new" if new else "")
        timing = f' style="--c:{round(COMMIT_AT + 0.08 * k / max(1, len(record.accepted_tokens)), 3)}"' if new else ""
        title = html.escape(f"step {record.step}: {origin} (click: show this step)", quote=True)
        spans.append(f'<span class="tok tok-{css}" data-token="{index}" title="{title}"{timing}>'
                     f'{html.escape(token_text(token)[:MAX_TOKEN_CHARS])}</span>')
    legend = source_legend_html()
    cut = f'<span class="empty">… {skipped:,} earlier tokens not shown (the timeline shows their steps) </span>' \
        if skipped else ""
    body = cut + "".join(spans) or '<span class="empty">Nothing generated yet.</span>'
    head = ""
    if prompt:
        badge = '<span class="badge">recorded run</span> ' if recorded else ""
        more = len(prompt) - MAX_SHOWN_PROMPT
        tail = f" <em>… {more:,} more characters not shown</em>" if more > 0 else ""
        head = (f'<div class="prompt">{badge}<strong>Prompt</strong>: {html.escape(prompt[:MAX_SHOWN_PROMPT])}'
                f'{tail}</div>')
    # the generated text comes last, in a plain div (benches/app_load.py's text_of reads it from there)
    return (f'<div class="{"tv-anim" if animate_last else "tv-static"}">{head}'
            f'<div class="legend">drafted and accepted by: {legend}</div><div class="generated">{body}</div></div>')


# the text panel's bounds: a replayed trace may hold 65,536 tokens; a live Run of 512 fits whole
MAX_SHOWN_TOKENS = 2_048
MAX_SHOWN_TEXT = 32_000      # characters of the shown tokens' text together
MAX_TOKEN_CHARS = 256        # characters of one token's text (records.trace_check's MAX_TOKEN_TEXT)
MAX_SHOWN_PROMPT = 32_000    # characters of the prompt (public mode's longest prompt fits)


def _newest_tokens(records: list[StepRecord], token_text) -> tuple[list, int]:
    """The newest committed tokens within the panel's bounds, oldest first, each (index in the run, its record,
    its place in the step, token, origin); and how many earlier ones are left out."""
    shown, chars = [], 0
    index = sum(len(r.accepted_tokens) for r in records)
    for record in reversed(records):
        committed = list(zip(record.accepted_tokens, record.accepted_origins))
        index -= len(record.accepted_tokens)
        for k in range(len(committed) - 1, -1, -1):
            if len(shown) >= MAX_SHOWN_TOKENS or chars >= MAX_SHOWN_TEXT:
                return shown[::-1], index + k + 1
            token, origin = committed[k]
            shown.append((index + k, record, k, token, origin))
            chars += 8 + min(len(token_text(token)), MAX_TOKEN_CHARS)  # markup counts, even for an empty text
    return shown[::-1], 0


def source_legend_html() -> str:
    """The sources grouped by family (logits / retrieval / model), then the marks; hover says what each is."""
    groups = []
    for family in sources.FAMILIES:
        members = [s for s in sources.SOURCES.values() if s.family == family]
        spans = " ".join(f'<span class="tok tok-{s.name}" title="{html.escape(s.legend, quote=True)}">{s.name}</span>'
                         for s in members)
        groups.append(f"<strong>{family}</strong>: {spans}")
    marks = " ".join(f'<span class="tok tok-{k}">{k}</span>' for k in ("several", *BENT_STATUSES, "bonus"))
    return " · ".join(groups) + f" · {marks}"


TOKEN_CSS = "\n".join(
    [".generated { white-space: pre-wrap; font-family: ui-monospace, monospace; line-height: 1.7; }",
     ".tok { border-radius: 3px; padding: 0 1px; cursor: pointer; }", ".legend { margin-bottom: 6px; font-size: 0.9em; }",
     ".prompt { max-height: 7.5em; overflow: auto; white-space: pre-wrap; font-size: 0.9em; color: #333; "
     "border-left: 3px solid #bbb; padding: 2px 8px; margin-bottom: 8px; }",
     ".badge { background: #222; color: #fff; border-radius: 4px; padding: 0 6px; font-size: 0.85em; "
     "text-transform: uppercase; letter-spacing: 0.04em; }",
     ".tv-anim .tok-new { animation-name: tv-show; animation-duration: calc(var(--pace) * 0.05s); "
     "animation-fill-mode: both; animation-delay: calc(var(--pace) * var(--c) * 1s); }"]
    + [".document { white-space: pre-wrap; max-height: 360px; overflow-y: auto; font-size: 0.9em; }",
       ".chunk { border-left: 2px solid #ddd; } .chunk-chosen { background: #2ca02c22; border-left: 3px solid #2ca02c; }"]
    + [".diff-lossless { background: #d6272833; }", ".diff-ours { background: #2ca02c33; text-decoration: none; }",
       ".diff-head { margin-bottom: 4px; font-weight: 600; }"]
    + [f".tok-{k} {{ background: {v}33; border-bottom: 2px {style} {v}; }}"
       for k, v, style in [*((s.name, s.colour, UNDERLINES[s.family]) for s in sources.SOURCES.values()),
                           *((k, v, UNDERLINES[k]) for k, v in MARK_COLOURS.items())]])


def budget_split_markdown(record: StepRecord | None) -> str:
    """How the last step's budget was shared: per source, the nodes it was offered, proposed, shared with
    an earlier source (trie union), kept in the verified tree and got accepted (bonus excluded)."""
    if record is None or len(record.nodes) == 1 and not record.split:
        return "**Budget split**: no draft tree this step (plain decoding)." if record else ""
    split = record.split or {}
    accepted = {}
    for origin in record.accepted_origins:
        for source in origin.sources:
            accepted[source] = accepted.get(source, 0) + 1
    rows = ["| source | offered | proposed | shared | kept | accepted |", "|---|---|---|---|---|---|"]
    for source, share in split.items():
        rows.append(f"| {md_text(source)} | {share.offered} | {share.proposed} | {share.shared} | "
                    f"{record.allocation.get(source, 0)} | {accepted.get(source, 0)} |")
    cut = record.plan.cut if record.plan else None
    if cut:
        head = (f"**Budget split** (auto: kept {cut.kept} of {cut.offered} offered nodes, "
                f"expected {cut.expected_accepted} accepted, ~{cut.expected_tokens_per_s} tok/s)")
    else:
        head = f"**Budget split** (fixed budget {record.budget})"
    return head + "\n\n" + "\n".join(rows)


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values) or "none yet"


def measured_choice_text(choice: MeasuredChoice) -> str:
    """What a measured choice (drafters.measured_choice) measured, and how often it explores."""
    rates = ", ".join(f"{md_text(k)} {v if v is not None else '?'} tok/s" for k, v in choice.tokens_per_s.items())
    explore = (f"; the other choice is tried every {choice.explore_every} steps"
               if choice.explore_every is not None else "")
    return f"measured {rates} (at the calibrated machine speed){explore}"


def respec_step_markdown(record: StepRecord | None, token_text) -> str:
    """ReSpec's decisions in the last step: the entropies H_k and scores C_k per key length, the key, whether
    retrieval fired, the candidate positions with their EMA scores, what drafted, and the relaxed tokens."""
    note = record.note(ReSpecNote) if record is not None else None
    if note is None:
        return ""
    e = note.trigger
    key = "".join(token_text(t) for t in e.key)
    lines = [f"**ReSpec, step {record.step}**: H_k = {_fmt(e.entropies)} · C_k = {_fmt(e.confidences)}",
             f"key k* = {e.key_length}: {md_code(visible_token(key))} (H_min {e.h_min:.2f}), seen "
             f"{e.matches} times before → retrieval **{'fired' if e.fired else 'not fired'}**"]
    retrieval = note.retrieval
    if retrieval:
        lines.append(f"{retrieval.matched} match positions, {retrieval.passed} at or above theta_score")
        if retrieval.candidates:
            lines += ["", "| position | EMA score | drafted | accepted | R |", "|---|---|---|---|---|"]
            for c in retrieval.candidates:
                rate = "not tried" if c.rate is None else f"{c.rate:.2f}"
                lines.append(f"| {c.position} | {c.score:.3f} | {c.drafted} | {c.accepted} | {rate} |")
            lines.append("")
    fallback = note.fallback
    lines.append(f"drafted by **{md_text(note.drafted_by)}** (fallback {md_text(fallback.mode)}: "
                 f"{measured_choice_text(fallback)})")
    relaxed = [visible_token(n.text) for n in record.nodes if n.status == NodeStatus.RELAXED]
    lines.append(f"relaxed acceptances: {', '.join(md_code(t) for t in relaxed) if relaxed else 'none'}")
    return "  \n".join(lines)


def token_diff_html(diff, token_text, reference: str = "the lossless output") -> str:
    """The output against the lossless (plain greedy) output: removed lossless tokens struck through,
    the tokens we produced instead highlighted; every token escaped."""
    if diff is None:
        return ""
    total = sum(len(ours) for _, _, ours in diff.ops)
    if diff.identical:
        return f'<div class="diff-head">Identical to {reference} ({total} tokens).</div>'
    head = (f'<div class="diff-head">{diff.differing} of {total} tokens differ from {reference} '
            f'(first at token {diff.first_difference}).</div>')
    parts = []
    for tag, lossless, ours in diff.ops:
        if tag == "equal":
            parts.append(html.escape("".join(token_text(t) for t in ours)))
            continue
        if lossless:
            parts.append(f'<del class="diff-lossless">{html.escape("".join(token_text(t) for t in lossless))}</del>')
        if ours:
            parts.append(f'<ins class="diff-ours">{html.escape("".join(token_text(t) for t in ours))}</ins>')
    return head + f'<div class="generated">{"".join(parts)}</div>'


def search_step_markdown(record: StepRecord | None) -> str:
    """READER's / unified's decisions in the last step: the widening branch (how long, which index, how
    much of the query matched), the deepening seed, whether the draft model stage ran, and the planner's
    predicted accepted drafts beside the measured ones."""
    if record is None:
        return ""
    lines = []
    search = record.note(SearchNote)
    if search:
        where = f" from the {md_text(search.index)}" if search.index else ""
        lines.append(f"**Widening**: {search.tokens} tokens searched{where} (query suffix matched "
                     f"{search.matched} tokens); datastore {md_text(search.datastore)}")
    deepen = record.note(DeepenNote)
    if deepen:
        lines.append("**Deepening**: no draft model branch to seed it" if deepen.seed is None else
                     f"**Deepening**: seeded at node {deepen.seed} (depth {deepen.seed_depth}), "
                     f"{deepen.tokens} tokens searched")
    stage = record.note(ModelStageNote)
    if stage:
        lines.append(f"**Draft model stage** {'ran' if stage.ran else 'skipped'} ({md_text(stage.choice.mode)}: "
                     f"{measured_choice_text(stage.choice)})")
    if record.plan is not None:
        at_least = accepted_at_least(record)
        spread = f" (exact chances would miss by {own_spread(at_least):.2f})" if at_least is not None else ""
        lines.append(f"**Predicted** {record.plan.predicted_accepted:.2f} accepted drafts{spread} · **measured** "
                     f"{record.num_accepted_drafts}" + _lesson_text(record.plan))
    return "  \n".join(lines)


def _lesson_text(plan: PlanDecision) -> str:
    """' · after learning from this step it expects 0.40 of the same tree (never learnt: 1.20)', or ''."""
    if plan.learnt_accepted is None:
        return ""
    unlearnt = f" (never learnt: {plan.unlearnt_accepted:.2f})" if plan.unlearnt_accepted is not None else ""
    return f" · after learning from this step it expects **{plan.learnt_accepted:.2f}** of the same tree{unlearnt}"


def prediction_figure(records: list[StepRecord]) -> go.Figure:
    """Per step, the planner's predicted accepted drafts E(T) - 1 beside the measured accepted drafts, and what
    it expected of the same tree once it had learnt from the step: a bad prediction, then the lesson."""
    planned = [r for r in records if r.plan is not None]
    steps = [r.step for r in planned]
    predicted = [r.plan.predicted_accepted for r in planned]
    measured = [r.num_accepted_drafts for r in planned]
    layout = dict(margin=dict(l=10, r=10, t=36, b=10), height=240, plot_bgcolor="white",
                  xaxis=dict(title="step", gridcolor="#eee"), yaxis=dict(title="accepted drafts", gridcolor="#eee"),
                  legend=dict(orientation="h", y=-0.36), title="predicted vs measured accepted drafts: no step yet")
    error = PredictionError.of(planned)
    if error is not None:
        # the error beside the one the planner's own chances expect: spread, not a wrong estimate, when they match;
        # then the same error after each step's lesson and with nothing learnt (does the run's learning help?)
        lessons = (f"<br>the same trees after learning from their step: {error.learnt_mae:.2f}; never learnt: "
                   f"{error.unlearnt_mae:.2f}" if error.learnt_mae is not None and error.unlearnt_mae is not None
                   else "")
        layout.update(title=dict(text=f"predicted vs measured accepted drafts: mean abs. error {error.mae:.2f}"
                                 f"<br><sup>exact chances would miss by {error.spread:.2f} a step; bias "
                                 f"{error.bias:+.2f}{lessons}</sup>", font=dict(size=13)),
                      margin=dict(l=10, r=10, t=62 if lessons else 48, b=10), height=270 if lessons else 240)
    series = [go.Scatter(x=steps, y=predicted, mode="lines+markers", name="predicted E(T) - 1",
                         line=dict(color="#7f7f7f", dash="dot")),
              go.Scatter(x=steps, y=measured, mode="lines+markers", name="measured", line=dict(color="#2a2a2a"))]
    learnt = [r.plan.learnt_accepted for r in planned]
    if planned and all(value is not None for value in learnt):
        series.append(go.Scatter(x=steps, y=learnt, mode="markers", name="after learning from the step",
                                 marker=dict(color="#9467bd", symbol="x", size=7)))
    # built whole by one constructor: update_layout's paths cost several times more (every step's view draws it)
    return go.Figure(data=series, layout=layout)


# ---- RAPID and sampling ---------------------------------------------------------------------------------
def document_html(document: str, retrieval: dict | None) -> str:
    """The long document with its chunks outlined and the ones the RAG drafter reads highlighted (hover:
    the chunk's score); every character escaped."""
    if retrieval is None:
        return ""
    chosen = set(retrieval["chosen"])
    head = (f'<div class="diff-head">RAG drafter reads {len(chosen)} of {retrieval["chunks"]} chunks '
            f'({retrieval["context_tokens"]} tokens, budget {retrieval["budget"]}; ranker {retrieval["ranker"]}, '
            f'{1000 * retrieval["seconds"]:.0f} ms)' + (f' · {html.escape(retrieval["note"])}' if retrieval["note"] else "")
            + "</div>")
    parts = []
    for i, ((start, end), score) in enumerate(zip(retrieval["spans"], retrieval["scores"])):
        css = "chunk chunk-chosen" if i in chosen else "chunk"
        title = html.escape(f"chunk {i}: score {score:.3f}" + (" (retrieved)" if i in chosen else ""), quote=True)
        parts.append(f'<span class="{css}" title="{title}">{html.escape(document[start:end])}</span>')
    return head + f'<div class="document">{"".join(parts)}</div>'


def node_choices(record: StepRecord | None, token_text) -> list[tuple[str, int]]:
    """Draft nodes whose position has a sampling chart (the parent was visited), as dropdown choices."""
    if record is None or record.sampling is None:
        return []
    charts = record.sampling.charts
    return [(f"node {n.id}: {visible_token(n.text)} (depth {n.depth}, {'+'.join(n.sources)}, {n.status})", n.id)
            for n in record.nodes if n.parent >= 0 and n.parent in charts]


def distribution_figure(record: StepRecord | None, node_id, token_text) -> go.Figure:
    """At the selected node's position: the target's p, the draft's q, RAPID's p_hat and what the rule
    emits there, over the top tokens, side by side."""
    layout = dict(margin=dict(l=10, r=10, t=40, b=10), height=300, plot_bgcolor="white", barmode="group",
                  yaxis=dict(title="probability", gridcolor="#eee"), legend=dict(orientation="h", y=-0.25),
                  title="p, q, p_hat at a node: sample (temperature > 0) and pick a node")
    charts = record.sampling.charts if record and record.sampling else {}
    node = next((n for n in record.nodes if n.id == node_id), None) if record and node_id is not None else None
    if node is None or node.parent not in charts:
        return go.Figure(layout=layout)
    chart = charts[node.parent]
    labels = [visible_token(token_text(t)) + (" ◀" if t == node.token_id else "") for t in chart.tokens]
    series = [("p (target)", chart.p, "#1f77b4"), ("q (draft)", chart.q, "#2ca02c"),
              ("p_hat (eta)", chart.p_hat, "#17becf"), ("emitted", chart.out, "#7f7f7f")]
    tv = f" · output vs p: TV {chart.tv:.3f}" if chart.tv is not None else ""
    layout["title"] = f"position of node {node.id} ({visible_token(node.text)}, {node.status}){tv}"
    return go.Figure(data=[go.Bar(x=labels, y=values, name=name, marker_color=colour)
                           for name, values, colour in series if values is not None], layout=layout)


def transfer_markdown(records: list[StepRecord], lossless: bool) -> str:
    """RAPID with eta > 0: how far the emitted distribution moved from the target's own, and how many
    drafts p_hat accepted that p would have refused."""
    if lossless or not records:
        return ""
    tvs = [c.tv for r in records if r.sampling for c in r.sampling.charts.values() if c.tv is not None]
    transferred = sum(n.mark is NodeStatus.TRANSFERRED for r in records for n in r.nodes)
    if not tvs:
        return ""
    return (f"**Lossy (eta > 0)**: at the {len(tvs)} drafted positions so far the emitted distribution differs "
            f"from the target's own by a mean total-variation distance of **{sum(tvs) / len(tvs):.3f}** "
            f"(max {max(tvs):.3f}); **{transferred}** drafts were accepted by p_hat where p would have refused "
            f"them (cyan ★ in the tree, cyan in the text).")
