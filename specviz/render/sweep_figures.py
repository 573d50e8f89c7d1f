"""The sweep's figure (studies.sweep_grid's SweepReport): a heatmap over two axes, a line over one."""

from __future__ import annotations

from specviz.studies.sweep_grid import METRICS, SweepReport, format_value
from specviz.errors import SpecvizError


def metric_cell(metric: str, value) -> str:
    """A metric's value as a cell of the figure shows it (blank for none)."""
    if value is None:
        return ""
    if metric == "differing_fraction":
        return f"{100 * value:.1f}%"
    if metric == "speedup":
        return f"{value:.2f}x"
    return f"{value:.1f}" if metric == "tokens_per_s" else f"{value:.2f}"


def grid_figure(report: SweepReport | None, metric: str = "speedup"):
    """A heatmap of the metric over two axes (first axis up, second across, each cell annotated), or a line
    over one axis; metric is one of studies.sweep_grid.METRICS (a SweepTotals field). An empty figure when
    there is no report yet."""
    import plotly.graph_objects as go

    if metric not in METRICS:
        raise SpecvizError(f"Unknown sweep metric '{metric}'; choose one of {', '.join(METRICS)}.")
    figure = go.Figure()
    layout = dict(height=420, font=dict(size=14), margin=dict(l=10, r=10, t=56, b=10), plot_bgcolor="white",
                  paper_bgcolor="white", hoverlabel=dict(align="left"))
    if report is None or not report.points:
        figure.update_layout(title=dict(text="Grid sweep: no results yet", font=dict(size=16)), **layout)
        return figure
    axes = report.axes
    title = f"{report.method}: {METRICS[metric]} by {' and '.join(a.name for a in axes)}"
    if len(axes) == 2:
        first, second = axes
        lookup = {(format_value(p.values[0][1]), format_value(p.values[1][1])): getattr(p, metric)
                  for p in report.points}
        ys, xs = [format_value(v) for v in first.values], [format_value(v) for v in second.values]
        z = [[lookup.get((y, x)) for x in xs] for y in ys]
        figure.add_trace(go.Heatmap(
            z=z, x=xs, y=ys, text=[[metric_cell(metric, v) for v in row] for row in z], texttemplate="%{text}",
            textfont=dict(size=14), colorscale="Reds" if metric == "differing_fraction" else "Viridis",
            colorbar=dict(title=dict(text=metric)),
            hovertemplate=f"{first.name}=%{{y}}<br>{second.name}=%{{x}}<br>{metric} %{{text}}<extra></extra>"))
        figure.update_xaxes(title_text=second.name, type="category")
        figure.update_yaxes(title_text=first.name, type="category")
    else:
        (axis,) = axes
        xs = [format_value(p.values[0][1]) for p in report.points]
        ys = [getattr(p, metric) for p in report.points]
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers+text", text=[metric_cell(metric, v) for v in ys],
                                    textposition="top center", name=metric,
                                    hovertemplate=f"{axis.name}=%{{x}}<br>{metric} %{{text}}<extra></extra>"))
        if metric == "speedup":
            figure.add_hline(y=1.0, line_dash="dot", line_color="#888", annotation_text="ar")
        figure.update_xaxes(title_text=axis.name, type="category", gridcolor="#eee")
        figure.update_yaxes(title_text=METRICS[metric], gridcolor="#eee", zeroline=False)
    figure.update_layout(title=dict(text=title, font=dict(size=16)), **layout)
    return figure
