"""Accounting of a generation, per step and per run, as plotly figures: where the drafts came from, what got
accepted, what the verify forward wasted, where the time went, the wall-clock race of two runs and why a
tree pays. Everything is built from step records only, so it works on a live run and on a replayed trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.tree import sources
from specviz.records.status import ACCEPTED_STATUSES
from specviz.records.step import StepRecord
from specviz.engine.prediction import SpeedupCheck
from specviz.render.step_panels import MARK_COLOURS

TIME_PARTS = (("draft", "draft", "#ff7f0e"), ("forward", "verify forward", "#1f77b4"),
              ("accept", "accept (verify - forward)", "#9467bd"), ("update", "update", "#7f7f7f"))
LANE_SHADES = (("#1f77b4", "#9ecae1"), ("#7f7f7f", "#c7c7c7"), ("#2ca02c", "#a1d99b"), ("#ff7f0e", "#fdd0a2"))
PREFILL_COLOUR = "#e0e0e0"


def _source_colour(name: str) -> str:
    return sources.colour(name) if sources.is_source(name) else MARK_COLOURS["several"]


def _look(title: str, height: int, top: int) -> dict:
    """The common look: white, readable on a projector, legend under the plot, numbers in left-aligned hovers."""
    return dict(title=dict(text=title, font=dict(size=16)), height=height, font=dict(size=14),
                margin=dict(l=10, r=10, t=top, b=10), plot_bgcolor="white", paper_bgcolor="white",
                legend=dict(orientation="h", y=-0.3), hoverlabel=dict(align="left"))


def _layout(figure: go.Figure, title: str, height: int = 330, top: int = 48, **extra) -> go.Figure:
    figure.update_layout(**_look(title, height, top), **extra)
    figure.update_xaxes(gridcolor="#eee", zeroline=False)
    figure.update_yaxes(gridcolor="#eee", zeroline=False)
    return figure


def _empty(title: str, height: int = 330) -> go.Figure:
    """An empty figure that says why it is empty, without bare axes: its layout given whole to the constructor,
    1 ms where update_layout's paths took 25 ms (a view with no step yet has six of them: every refusal's, every new
    session's, issue 73's soak)."""
    hidden = dict(gridcolor="#eee", zeroline=False, visible=False)
    return go.Figure(layout=dict(**_look(title, height, 48), xaxis=hidden, yaxis=hidden))


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _step_times(record: StepRecord) -> dict[str, float]:
    t = record.timings_ms
    return {"draft": t.draft, "forward": t.forward, "accept": max(0.0, t.verify - t.forward), "update": t.update}


# ---- the numbers ----------------------------------------------------------------------------------------
def run_accounting(records: list[StepRecord]) -> dict:
    """The numbers behind the figures. Per source: proposed (the split's counts, else the allocation),
    verified and accepted draft nodes (a node several sources proposed counts for each); acceptance by depth
    {depth: (accepted, verified)}; per-step verified / accepted / wasted drafts; time totals; steps, tokens."""
    counts: dict[str, dict[str, int]] = {name: {"proposed": 0, "verified": 0, "accepted": 0}
                                         for name in sources.SOURCES}
    by_depth: dict[int, list[int]] = {}
    verified_per_step, accepted_per_step = [], []
    time_ms = {"draft": 0.0, "forward": 0.0, "accept": 0.0, "update": 0.0, "total": 0.0}
    for record in records:
        proposed = ({source: share.proposed for source, share in record.split.items()} if record.split
                    else dict(record.allocation))
        for source, n in proposed.items():
            counts.setdefault(source, {"proposed": 0, "verified": 0, "accepted": 0})["proposed"] += n
        for node in record.nodes:
            if node.parent < 0:
                continue
            accepted = node.status in ACCEPTED_STATUSES
            for source in node.sources:
                row = counts.setdefault(source, {"proposed": 0, "verified": 0, "accepted": 0})
                row["verified"] += 1
                row["accepted"] += accepted
            depth = by_depth.setdefault(node.depth, [0, 0])
            depth[0] += accepted
            depth[1] += 1
        verified_per_step.append(len(record.nodes) - 1)
        accepted_per_step.append(record.num_accepted_drafts)
        for part, ms in _step_times(record).items():
            time_ms[part] += ms
        time_ms["total"] += record.timings_ms.total
    per_source = {name: {**row, "rate": row["accepted"] / row["verified"] if row["verified"] else None}
                  for name, row in counts.items() if any(row.values())}
    wasted = [v - a for v, a in zip(verified_per_step, accepted_per_step)]
    verified = sum(verified_per_step)
    return {"steps": len(records), "tokens": sum(len(r.accepted_tokens) for r in records),
            "accepted_drafts": sum(accepted_per_step), "verified": verified,
            "sources": per_source,
            "by_depth": {d: (a, v) for d, (a, v) in sorted(by_depth.items())},
            "by_source": {name: row["rate"] for name, row in per_source.items()},
            "step_numbers": [r.step for r in records], "verified_per_step": verified_per_step,
            "accepted_per_step": accepted_per_step, "wasted_per_step": wasted,
            "wasted": sum(wasted), "wasted_share": _share(sum(wasted), verified),
            "time_ms": time_ms}


# ---- per run ------------------------------------------------------------------------------------------
def sources_figure(records: list[StepRecord]) -> go.Figure:
    """Per source, grouped bars: draft nodes proposed, verified (kept in the tree) and accepted."""
    figure = go.Figure()
    numbers = run_accounting(records)
    rows = numbers["sources"]
    if not rows:
        return _empty("Drafts by source: no draft tree yet")
    names = list(rows)
    series = [("proposed", ["#d0d0d0"] * len(names)), ("verified", ["#8c8c8c"] * len(names)),
              ("accepted", [_source_colour(n) for n in names])]
    for key, colours in series:
        figure.add_trace(go.Bar(
            x=names, y=[rows[n][key] for n in names], name=key, marker_color=colours,
            text=[rows[n][key] for n in names], textposition="outside", cliponaxis=False,
            hovertext=[f"<b>{n}</b><br>proposed {rows[n]['proposed']}<br>verified {rows[n]['verified']}<br>"
                       f"accepted {rows[n]['accepted']}"
                       + (f" ({rows[n]['rate']:.0%} of verified)" if rows[n]["rate"] is not None else "")
                       for n in names], hoverinfo="text"))
    title = (f"Drafts by source over {numbers['steps']} steps: {numbers['verified']} verified, "
             f"{numbers['accepted_drafts']} accepted<br><span style='font-size:13px'>a node several sources proposed counts for each</span>")
    return _layout(figure, title, top=64, barmode="group", yaxis_title="draft nodes")


def acceptance_figure(records: list[StepRecord]) -> go.Figure:
    """Acceptance rate (accepted / verified draft nodes) by tree depth and by source, with the counts."""
    numbers = run_accounting(records)
    if not numbers["by_depth"]:
        return _empty("Acceptance rate: no draft tree yet")
    figure = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1,
                           subplot_titles=("by depth", "by source"))
    depths = list(numbers["by_depth"])
    pairs = list(numbers["by_depth"].values())
    figure.add_trace(go.Bar(
        x=depths, y=[_share(a, v) for a, v in pairs], name="by depth", marker_color="#2a2a2a", showlegend=False,
        text=[f"{a}/{v}" for a, v in pairs], textposition="outside", cliponaxis=False,
        hovertext=[f"depth {d}: {a} of {v} verified nodes accepted ({_share(a, v):.0%})"
                   for d, (a, v) in zip(depths, pairs)], hoverinfo="text"), row=1, col=1)
    rows = {n: r for n, r in numbers["sources"].items() if r["verified"]}
    figure.add_trace(go.Bar(
        x=list(rows), y=[r["rate"] for r in rows.values()], name="by source", showlegend=False,
        marker_color=[_source_colour(n) for n in rows],
        text=[f"{r['accepted']}/{r['verified']}" for r in rows.values()], textposition="outside", cliponaxis=False,
        hovertext=[f"<b>{n}</b>: {r['accepted']} of {r['verified']} verified nodes accepted ({r['rate']:.0%})"
                   for n, r in rows.items()], hoverinfo="text"), row=1, col=2)
    accepted = sum(a for a, _ in pairs)
    _layout(figure, f"Acceptance rate: {accepted} of {numbers['verified']} verified draft nodes "
                    f"({_share(accepted, numbers['verified']):.0%})", top=70)
    figure.update_yaxes(range=[0, 1.15], tickformat=".0%")
    figure.update_xaxes(title_text="depth", dtick=1, row=1, col=1)
    return figure


def waste_figure(records: list[StepRecord]) -> go.Figure:
    """Per step, the verified draft tokens split into accepted and wasted (verified but not accepted)."""
    figure = go.Figure()
    numbers = run_accounting(records)
    if not records:
        return _empty("Wasted verify tokens: no step yet")
    steps = numbers["step_numbers"]
    accepted, wasted = numbers["accepted_per_step"], numbers["wasted_per_step"]
    hover = [f"step {s}: {a + w} draft tokens verified, {a} accepted, {w} wasted"
             for s, a, w in zip(steps, accepted, wasted)]
    figure.add_trace(go.Bar(x=steps, y=accepted, name="accepted drafts", marker_color="#2ca02c",
                            hovertext=hover, hoverinfo="text"))
    figure.add_trace(go.Bar(x=steps, y=wasted, name="wasted (verified, not accepted)", marker_color="#d0d0d0",
                            hovertext=hover, hoverinfo="text"))
    title = (f"Wasted verify tokens: {numbers['wasted']} of {numbers['verified']} verified draft tokens "
             f"({numbers['wasted_share']:.0%})")
    return _layout(figure, title, barmode="stack", xaxis_title="step", yaxis_title="draft tokens")


def time_split_figure(records: list[StepRecord]) -> go.Figure:
    """Per step, stacked ms: draft, verify forward, accept (verify minus forward) and update; the title has
    the run's totals and shares."""
    figure = go.Figure()
    if not records:
        return _empty("Time per step: no step yet")
    steps = [r.step for r in records]
    times = [_step_times(r) for r in records]
    for key, name, colour in TIME_PARTS:
        figure.add_trace(go.Bar(
            x=steps, y=[t[key] for t in times], name=name, marker_color=colour,
            hovertext=[f"step {s}: {name} {t[key]:.1f} ms of {sum(t.values()):.1f} ms"
                       for s, t in zip(steps, times)], hoverinfo="text"))
    totals = run_accounting(records)["time_ms"]
    whole = sum(totals[key] for key, _, _ in TIME_PARTS)
    shares = " · ".join(f"{key} {totals[key]:.0f} ms ({_share(totals[key], whole):.0%})" for key, _, _ in TIME_PARTS)
    return _layout(figure, f"Time per step: {whole:.0f} ms in {len(records)} steps<br><span style='font-size:13px'>{shares}</span>",
                   top=64, barmode="stack", xaxis_title="step", yaxis_title="ms")


# ---- two runs side by side ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lane:
    """One run on the wall-clock view."""
    label: str                   # what ran ("racer", "ar", "ar (shipped trace)")
    prefill_ms: float            # ms: the prefill before its first step
    records: list[StepRecord]    # its steps in order, laid end to end by their timings_ms.total


def lanes_figure(lanes: list[Lane]) -> go.Figure:
    """Wall-clock lanes on one time axis (ms): per lane its prefill, then one segment per step as wide as
    the step took, labelled with the tokens it committed; tokens and ms at each lane's end; the title has
    lane 0's speedup over lane 1 in tokens per ms."""
    figure = go.Figure()
    if not lanes:
        return _empty("Wall clock: no run yet", height=300)
    totals = []
    for i, lane in enumerate(lanes):
        label, prefill_ms, records = lane.label, lane.prefill_ms, lane.records
        dark, light = LANE_SHADES[i % len(LANE_SHADES)]
        figure.add_trace(go.Bar(
            x=[prefill_ms], base=[0.0], y=[i], orientation="h", marker_color=PREFILL_COLOUR, showlegend=False,
            marker_line=dict(color="white", width=1), text=["prefill"], textposition="inside",
            insidetextanchor="middle", textangle=0, hovertext=[f"{label}: prefill {prefill_ms:.1f} ms"], hoverinfo="text"))
        starts, widths, texts, hovers = [], [], [], []
        clock, tokens = prefill_ms, 0
        for record in records:
            width = record.timings_ms.total
            committed = len(record.accepted_tokens)
            tokens += committed
            starts.append(clock)
            widths.append(width)
            texts.append(str(committed))
            hovers.append(f"{label}, step {record.step}: +{committed} tokens "
                          f"({record.num_accepted_drafts} accepted + 1 bonus) in {width:.1f} ms<br>"
                          f"{clock:.1f} → {clock + width:.1f} ms · {tokens} tokens so far")
            clock += width
        figure.add_trace(go.Bar(
            x=widths, base=starts, y=[i] * len(widths), orientation="h", name=label, showlegend=False,
            marker_color=[dark if k % 2 == 0 else light for k in range(len(widths))],
            marker_line=dict(color="white", width=1), text=texts, textposition="inside",
            insidetextanchor="middle", textangle=0, hovertext=hovers, hoverinfo="text"))
        rate = f", {1000 * tokens / clock:.1f} tok/s" if clock > 0 else ""
        figure.add_annotation(x=clock, y=i, text=f"<b>{tokens} tokens · {clock:.0f} ms</b>{rate}", showarrow=False,
                              xanchor="left", xshift=6, font=dict(size=13))
        totals.append((tokens, clock, clock - prefill_ms))
    title = "Wall clock"
    if len(totals) >= 2 and all(t[0] > 0 and t[1] > 0 for t in totals[:2]):
        (tokens0, ms0, decode0), (tokens1, ms1, decode1) = totals[:2]
        speedup = (tokens0 / ms0) / (tokens1 / ms1)
        title = f"Wall clock: {lanes[0].label} is {speedup:.2f}× {lanes[1].label} in tokens/ms"
        if decode0 > 0 and decode1 > 0:
            title += f" (decoding alone {(tokens0 / decode0) / (tokens1 / decode1):.2f}×)"
    longest = max(t[1] for t in totals)
    _layout(figure, title, height=max(240, min(360, 150 + 70 * len(lanes))), barmode="overlay", bargap=0.35,
            uniformtext=dict(minsize=10, mode="hide"))
    figure.update_xaxes(title_text="ms", range=[0, 1.3 * longest if longest > 0 else 1])
    figure.update_yaxes(tickvals=list(range(len(lanes))), ticktext=[lane.label for lane in lanes],
                        autorange="reversed", showgrid=False)
    return figure


# ---- why a tree pays ------------------------------------------------------------------------------------
def _cost_at(cost_curve: dict, q) -> np.ndarray:
    """Measured verify ms at q tree tokens: linear between measured sizes, the last slope past the largest."""
    sizes = np.asarray(cost_curve["sizes"], dtype=np.float64)
    ms = np.asarray(cost_curve["ms"], dtype=np.float64)
    order = np.argsort(sizes)
    sizes, ms = sizes[order], ms[order]
    q = np.asarray(q, dtype=np.float64)
    costs = np.interp(q, sizes, ms)
    if len(sizes) >= 2:
        slope = (ms[-1] - ms[-2]) / (sizes[-1] - sizes[-2])
        costs = np.where(q > sizes[-1], ms[-1] + slope * (q - sizes[-1]), costs)
    return costs


def cost_figure(cost_curve: dict | None, expected_curve: list[float] | None, chosen: int | None,
                draft_ms: float = 0.0, verify_ms: list[float] | None = None, step: SpeedupCheck | None = None,
                run: SpeedupCheck | None = None) -> go.Figure:
    """Why a tree pays: left, the measured verify ms by tree size; right, the expected speedup over plain
    decoding when keeping the best k nodes, ((1 + E[k]) / (draft_ms + cost(k + 1))) / (1 / cost(1)), with
    the chosen budget marked. verify_ms: the costs the planner priced this step at (its online-corrected
    curve; else the calibrated one is read). step, run: predicted beside measured speedup over ar."""
    if not cost_curve or not cost_curve.get("sizes"):
        return _empty("Why a tree pays: no measured verify cost yet (the auto budget measures it)")
    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                           subplot_titles=("verify cost (measured)", "expected speedup over plain decoding"))
    sizes, ms = list(cost_curve["sizes"]), list(cost_curve["ms"])
    largest = max(max(sizes), len(expected_curve) if expected_curve else 1)
    grid = np.arange(1, largest + 1)
    figure.add_trace(go.Scatter(x=grid, y=_cost_at(cost_curve, grid), mode="lines", line=dict(color="#9ecae1"),
                                name="interpolated", showlegend=False, hoverinfo="skip"), row=1, col=1)
    figure.add_trace(go.Scatter(
        x=sizes, y=ms, mode="markers", marker=dict(color="#1f77b4", size=9), name="measured", showlegend=False,
        hovertext=[f"{q} tokens: {m:.1f} ms ({m / ms[0]:.2f}× one token)" if ms[0] else f"{q} tokens: {m:.1f} ms"
                   for q, m in zip(sizes, ms)], hoverinfo="text"), row=1, col=1)
    figure.update_xaxes(title_text="tree tokens (root included)", row=1, col=1)
    figure.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    if not expected_curve:
        figure.add_annotation(text="no expected-acceptance curve yet<br>(the auto budget plans one each step)",
                              xref="x2 domain", yref="y2 domain", x=0.5, y=0.5, showarrow=False)
        return _layout(figure, "Why a tree pays: measured verify cost", top=70)
    k = np.arange(len(expected_curve))
    expected = np.asarray(expected_curve, dtype=np.float64)
    if verify_ms and len(verify_ms) >= len(expected_curve):  # the planner's own prices this step
        cost = np.asarray(verify_ms[:len(expected_curve)], dtype=np.float64)
        one = float(verify_ms[0])
    else:
        one = float(_cost_at(cost_curve, 1))
        cost = _cost_at(cost_curve, k + 1)
    speedup = (1 + expected) / (draft_ms + cost) * one
    figure.add_hline(y=1.0, line=dict(color="#bbb", dash="dot"), row=1, col=2)
    figure.add_trace(go.Scatter(
        x=k, y=speedup, mode="lines+markers", line=dict(color="#2a2a2a"), marker=dict(size=5), showlegend=False,
        name="expected speedup",
        hovertext=[f"keep {i} nodes: E[accepted] {e:.2f}, verify {c:.1f} ms + draft and overhead {draft_ms:.1f} ms<br>"
                   f"→ {1 + e:.2f} tokens per {draft_ms + c:.1f} ms = {s:.2f}× plain"
                   for i, e, c, s in zip(k, expected, cost, speedup)], hoverinfo="text"), row=1, col=2)
    best = int(np.argmax(speedup))
    title = f"Why a tree pays: best k = {best} ({speedup[best]:.2f}× plain)"
    if chosen is not None and 0 <= chosen < len(speedup):
        figure.add_vline(x=chosen, line=dict(color="#d62728", dash="dash"), row=1, col=2)
        figure.add_trace(go.Scatter(x=[chosen], y=[speedup[chosen]], mode="markers", showlegend=False,
                                    marker=dict(color="#d62728", size=13, symbol="star"), name="chosen",
                                    hovertext=[f"chosen budget {chosen}: {speedup[chosen]:.2f}× plain"],
                                    hoverinfo="text"), row=1, col=2)
        figure.add_annotation(x=chosen, y=speedup[chosen], xref="x2", yref="y2", text=f"chosen k = {chosen}",
                              showarrow=True, arrowhead=2, ax=45, ay=-30, xanchor="left", font=dict(color="#d62728"))
        title += f" · chosen k = {chosen} ({speedup[chosen]:.2f}×)"
        if step is not None and step.measured is not None:
            figure.add_trace(go.Scatter(x=[chosen], y=[step.measured], mode="markers", showlegend=False,
                                        marker=dict(color="#000", size=12, symbol="diamond"), name="measured",
                                        hovertext=[f"this step measured {step.measured:.2f}× ar"], hoverinfo="text"),
                             row=1, col=2)
    figure.update_xaxes(title_text="draft nodes kept (k)", row=1, col=2)
    figure.update_yaxes(title_text="× plain decoding", rangemode="tozero", row=1, col=2)
    lines = [line for line in (_check_line("this step", step), _check_line("the run so far", run)) if line]
    if lines:
        title += "<br><sup>" + "<br>".join(lines) + "</sup>"
    return _layout(figure, title, height=380 if lines else 330, top=110 if lines else 70)


def _check_line(what: str, c: SpeedupCheck | None) -> str:
    """'this step: predicted 2.10× ar, measured 1.40× (accepted ×0.90, time ×1.30, ar ×1.05)'."""
    if c is None or c.predicted is None:
        return ""
    measured = f"measured {c.measured:.2f}×" if c.measured is not None else "measured: no ar run yet"
    factors = [f"{name} ×{value:.2f}" for name, value in
               (("accepted", c.accepted_factor), ("time", c.time_factor), ("ar", c.ar_factor)) if value is not None]
    return f"{what}: predicted {c.predicted:.2f}× ar, {measured}" + (f" ({', '.join(factors)})" if factors else "")
