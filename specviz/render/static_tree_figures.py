"""The static-tree tab's figures: the tree drawn depth by depth (each node's rank and measured chance), and the
expected speedup and accepted tokens by tree size N with the best N marked."""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.studies.static_study import StaticTreeStudy
from specviz.engine_configs.advice import EngineAdvice
from specviz.tree.static_tree import RankPath, StaticTree

ROW_PX = 22  # height of one leaf row of the tree figure


def _rows(tree: StaticTree) -> dict[RankPath, float]:
    """A tidy layout: leaves on successive rows in depth-first order, a parent centred on its children."""
    children: dict[RankPath, list[RankPath]] = {}
    for path in tree.paths:
        children.setdefault(path[:-1], []).append(path)
    rows: dict[RankPath, float] = {}
    next_row = [0]

    def place(path: RankPath) -> float:
        kids = sorted(children.get(path, []))
        if not kids:
            rows[path] = next_row[0]
            next_row[0] += 1
        else:
            placed = [place(kid) for kid in kids]
            rows[path] = (placed[0] + placed[-1]) / 2
        return rows[path]

    place(())
    return rows


def static_tree_figure(tree: StaticTree, counts: dict[RankPath, int] | None = None) -> go.Figure:
    """Root at depth 0, each rank path at its depth; a node's colour and label give its measured chance."""
    rows = _rows(tree)
    chance = {(): 1.0, **dict(zip(tree.paths, tree.chances))}
    edge_x, edge_y = [], []
    for path in tree.paths:
        parent = path[:-1]
        edge_x += [len(parent), len(path), None]
        edge_y += [rows[parent], rows[path], None]
    nodes = [(), *tree.paths]
    hover = [("root: the last committed token" if not p else
              f"rank path {p}: accepted at {100 * chance[p]:.1f}% of positions"
              + (f" ({counts.get(p, 0)} times)" if counts is not None else "")) for p in nodes]
    figure = go.Figure([
        go.Scatter(x=edge_x, y=edge_y, mode="lines", line={"color": "#9aa4b2", "width": 1}, hoverinfo="skip"),
        go.Scatter(x=[len(p) for p in nodes], y=[rows[p] for p in nodes], mode="markers+text",
                   text=["root" if not p else f"r{p[-1]} · {chance[p]:.2f}" for p in nodes], textposition="middle right",
                   textfont={"size": 11}, hovertext=hover, hoverinfo="text",
                   marker={"size": 14, "color": [chance[p] for p in nodes], "colorscale": "Viridis", "cmin": 0,
                           "cmax": 1, "line": {"width": 1, "color": "#333"},
                           "colorbar": {"title": {"text": "chance"}, "thickness": 12}}),
    ])
    leaves = max(rows.values(), default=0) + 1
    figure.update_layout(
        title=f"Static tree of {tree.size} draft tokens, depth {tree.depth}: "
              f"{tree.expected_accepted:.2f} accepted a step expected",
        showlegend=False, height=max(260, int(ROW_PX * leaves) + 110), margin={"l": 30, "r": 20, "t": 50, "b": 40},
        xaxis={"title": "depth (draft level)", "dtick": 1, "range": [-0.3, tree.depth + 0.9]},
        yaxis={"visible": False, "autorange": "reversed"}, plot_bgcolor="white")
    return figure


def speedup_figure(study: StaticTreeStudy, chosen: int | None = None) -> go.Figure:
    """Expected speedup (left axis) and expected accepted tokens (right axis) by N; the best N starred, the
    chosen N a dashed line."""
    sizes = list(range(1, study.supported + 1))
    best = study.best_tokens
    figure = go.Figure([
        go.Scatter(x=sizes, y=study.expected_speedup, mode="lines+markers", name="expected speedup vs ar",
                   marker={"size": 5}),
        go.Scatter(x=sizes, y=study.expected_accepted, mode="lines", name="expected accepted a step",
                   yaxis="y2", line={"dash": "dot"}),
        go.Scatter(x=[best], y=[study.expected_speedup[best - 1]], mode="markers+text", name=f"best N = {best}",
                   marker={"symbol": "star", "size": 16, "color": "#d62728"}, text=[f"best N = {best}"],
                   textposition="top center"),
    ])
    if chosen is not None and 1 <= chosen <= study.supported:
        figure.add_vline(x=chosen, line_dash="dash", line_color="#888",
                         annotation_text=f"N = {chosen}", annotation_position="bottom right")
    low, high = min(study.expected_speedup), max(study.expected_speedup)
    pad = max(high - low, 0.05) * 0.15  # room above the starred best N for its label
    figure.update_layout(
        title=f"{study.drafter}: the best static tree of each size on the cost curve of {study.deployment.label()}",
        height=330, margin={"l": 50, "r": 50, "t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25},
        xaxis={"title": "draft tokens N", **({"dtick": 1} if study.supported <= 16 else {})},
        yaxis={"title": "expected speedup (x ar)", "range": [low - pad, high + 2 * pad]},
        yaxis2={"title": "accepted a step", "overlaying": "y", "side": "right", "showgrid": False})
    return figure


def level_table_markdown(study: StaticTreeStudy, levels: int = 2) -> str:
    """The first levels' chances by rank path with counts and 95% intervals (Wilson's)."""
    acceptance = study.acceptance
    lines = [f"**{study.drafter}**: {acceptance.positions} positions of {study.prompts} prompts; one drafter "
             f"level {study.level_ms:.2f} ms; trees up to N = {study.supported} are supported (a path counts once "
             f"followed 3 times); best N on the cost curve of {study.deployment.label()}: **{study.best_tokens}** "
             f"({study.expected_speedup[study.best_tokens - 1]:.2f}x expected).", "",
             "| rank path | accepted | count | 95% interval |", "|---|---|---|---|"]
    for path, count, chance, (low, high) in acceptance.level_table(levels)[:24]:
        lines.append(f"| {path} | {chance:.3f} | {count} | {low:.3f} to {high:.3f} |")
    return "\n".join(lines)


def engine_advice_markdown(advice: EngineAdvice) -> str:
    """An engine's advice in a few lines: its knobs, the predicted figures under its own rule, where its rules were
    read, the notes, and any rule the config breaks; or why the engine cannot take this drafter."""
    if advice.refused:
        return f"**{advice.engine}** cannot take this drafter: {advice.refused}"
    knobs = ", ".join(f"`{name}` {value}" for name, value in advice.knobs)
    lines = [f"**{advice.engine}**: {knobs}. Predicted **{advice.predicted_accepted:.2f}** accepted drafts a step "
             f"under {advice.engine}'s own drafting rule ({advice.verified_tokens} tokens verified), **"
             f"{advice.predicted_speedup:.2f}x** on the cost curve of {advice.priced_on}. Rules read from "
             f"{advice.rules.where}."]
    lines += [f"- {note}" for note in advice.notes]
    lines += [f"- ⚠️ {advice.engine} would refuse it: {problem}" for problem in advice.problems]
    return "\n".join(lines)
