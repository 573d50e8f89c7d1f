"""Grid sweep: one method over one or two axes (its parameters, or the run settings budget, temperature,
top_p and seed), interleaved per prompt after plain greedy `ar` (the lossless reference) and, for sampled
points, `ar` at the same sampling settings (the speed baseline).

Per point and prompt: new tokens, steps, MAT, wall seconds, tokens/s, speedup against `ar` at the same
sampling, the share of output tokens that differ from greedy `ar`'s output and where the first one is,
and for greedy points the verdict of engine.divergence (yes / tie@k / lossy@k / MISMATCH). Every value and
every combination is checked before anything runs, and the grid's size is capped (grid points, and
points x prompts) before any model is needed: this module imports the model side (torch) only where it
runs."""

from __future__ import annotations

import csv
import io
import math
from typing import TYPE_CHECKING, Callable

from specviz.params import Param
from specviz.errors import SpecvizError
from specviz.engine.totals import by_category, totals

if TYPE_CHECKING:
    from specviz.accept.sampling import SamplingSettings
    from specviz.engine.run import RunResult
    from specviz.runtime.loading import LoadedModel

MAX_SWEEP_POINTS = 64    # grid points (the product of the axes' value counts)
MAX_SWEEP_RUNS = 400     # grid points x prompts (the ar references and baselines come on top)
MAX_AXES = 2
RUN_SETTINGS = ("budget", "temperature", "top_p", "seed")
SAMPLING_AXES = ("temperature", "top_p", "seed")
METRICS = {"mat": "MAT (tokens per step)", "tokens_per_s": "tokens/s", "speedup": "speedup vs ar",
           "differing_fraction": "share of tokens differing from greedy ar"}
BASELINE = "ar"              # as tools.bench: the plain greedy reference, and the speed baseline
GREEDY_KEY = (0.0, 1.0, 0)   # every greedy setting shares plain greedy ar (top_p and seed change nothing)


# ---- the grid, checked without a model -------------------------------------------------------------
def parse_axes(specs: list[str]) -> list[tuple[str, list]]:
    """'NAME=V1,V2,...' per axis (one or two) into [(name, [value text, ...])]; values are checked against
    a method by grid_points. Refuses malformed specs, empty values, a name or value given twice, more than
    two axes and a grid over MAX_SWEEP_POINTS points (before anything else is done)."""
    specs = [str(s) for s in (specs or []) if str(s).strip()]
    if not specs:
        raise SpecvizError("A sweep needs at least one axis: --vary NAME=V1,V2,... (e.g. tau=0,5).")
    axes = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = _axis_name(name)
        if not sep or not name or not values.strip():
            raise SpecvizError(f"--vary takes NAME=V1,V2,... (e.g. tau=0,5), got {spec!r}.")
        parts = [v.strip() for v in values.split(",")]
        if any(not v for v in parts):
            raise SpecvizError(f"--vary {spec.strip()} has an empty value: separate values by single commas.")
        axes.append((name, parts))
    return _checked_shape(axes)


def _axis_name(name) -> str:
    name = str(name).strip()
    return "top_p" if name == "top-p" else name


def _checked_shape(axes: list[tuple[str, list]]) -> list[tuple[str, list]]:
    """One or two axes, distinct names, distinct non-empty values, at most MAX_SWEEP_POINTS points."""
    if not axes:
        raise SpecvizError("A sweep needs at least one axis: --vary NAME=V1,V2,... (e.g. tau=0,5).")
    if len(axes) > MAX_AXES:
        raise SpecvizError(f"A sweep varies one or two parameters; got {len(axes)} axes "
                           f"({', '.join(name for name, _ in axes)}).")
    names = [name for name, _ in axes]
    for name in names:
        if not name:
            raise SpecvizError("A sweep axis needs a parameter name.")
        if names.count(name) > 1:
            raise SpecvizError(f"{name} is varied twice: give each parameter one axis.")
    size = math.prod(len(values) for _, values in axes)
    if size > MAX_SWEEP_POINTS:
        shape = " x ".join(str(len(values)) for _, values in axes)
        raise SpecvizError(f"A sweep holds at most {MAX_SWEEP_POINTS} grid points; this one asks for "
                           f"{shape} = {size}. Give fewer values.")
    for name, values in axes:
        if not values:
            raise SpecvizError(f"The axis {name} has no value.")
        texts = [str(v).strip() for v in values]
        for text in texts:
            if not text:
                raise SpecvizError(f"The axis {name} has an empty value.")
            if texts.count(text) > 1:
                raise SpecvizError(f"{name} lists the value {text} twice.")
    return axes


def _normalised_axes(axes) -> list[tuple[str, list]]:
    """Axes as parse_axes returns them, as {"name", "values"} dicts, or as 'NAME=V1,...' strings."""
    if axes and all(isinstance(a, str) for a in axes):
        return parse_axes(axes)
    out = []
    for axis in axes or []:
        if isinstance(axis, dict):
            name, values = axis.get("name"), axis.get("values")
        elif isinstance(axis, (tuple, list)) and len(axis) == 2:
            name, values = axis
        else:
            raise SpecvizError(f"A sweep axis is a name and its values, got {axis!r}.")
        if isinstance(values, str):
            values = [v.strip() for v in values.split(",")]
        out.append((_axis_name(name), list(values or [])))
    return _checked_shape(out)


def _fmt(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _as_kwargs(sampling) -> dict:
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed}


def grid_points(method: str, axes, params: dict | None = None, budget="auto",
                sampling: "SamplingSettings | None" = None, prompts: int | None = None) -> list[dict]:
    """Every point of the grid, checked: each value alone (the parameter's range, parse_budget,
    SamplingSettings.checked), then each combination (the method's cross-parameter checks and its
    check_sampling). params, budget, sampling (None: greedy): the fixed settings, which an axis of the same
    name overrides. prompts: how many prompts it will run on (MAX_SWEEP_RUNS). Needs no model. Returns per
    point {"values": {axis: value}, "label", "where", "params", "budget", "sampling"}."""
    from specviz.accept.sampling import SamplingSettings
    from specviz.methods import get_method, parse_budget

    sampling = sampling or SamplingSettings()
    axes = _normalised_axes(axes)
    if prompts is not None:
        if prompts < 1:
            raise SpecvizError("A sweep needs at least one prompt.")
        size = math.prod(len(values) for _, values in axes)
        if size * prompts > MAX_SWEEP_RUNS:
            raise SpecvizError(f"A sweep makes at most {MAX_SWEEP_RUNS} runs (grid points x prompts); this one "
                               f"asks for {size} x {prompts} = {size * prompts}. Use fewer values or prompts "
                               f"(--category).")
    spec = get_method(method)
    by_name = {p.name: p for p in spec.params}
    varied = {name for name, _ in axes}
    fixed = spec.resolve_params({k: v for k, v in (params or {}).items() if k not in varied})
    base_budget = parse_budget(budget)
    coerced = []
    for name, values in axes:
        if name in by_name:
            parsed = [by_name[name].coerce(v) for v in values]
        elif name == "budget":
            parsed = [parse_budget(v) for v in values]
        elif name in SAMPLING_AXES:
            parsed = [getattr(SamplingSettings.checked(**{**_as_kwargs(sampling), name: v}), name) for v in values]
        else:
            known = ", ".join(sorted(by_name)) or "none"
            raise SpecvizError(f"Method '{method}' has no parameter '{name}' (it has: {known}); a sweep can also "
                               f"vary the run settings {', '.join(RUN_SETTINGS)}.")
        for value in parsed:
            if parsed.count(value) > 1:
                raise SpecvizError(f"{name} lists the value {_fmt(value)} twice.")
        coerced.append((name, parsed))
    points = []
    for combination in _product([values for _, values in coerced]):
        values = {name: value for (name, _), value in zip(coerced, combination)}
        where = ", ".join(f"{k}={_fmt(v)}" for k, v in values.items())
        try:
            point_params = spec.resolve_params({**fixed, **{k: v for k, v in values.items() if k in by_name}})
            point_sampling = SamplingSettings.checked(**{**_as_kwargs(sampling),
                                                        **{k: v for k, v in values.items() if k in SAMPLING_AXES}})
            spec.check_sampling(point_params, point_sampling)
        except SpecvizError as error:
            raise SpecvizError(f"The sweep point {where} is refused: {error}") from None
        points.append({"values": values, "label": ", ".join(_fmt(v) for v in values.values()), "where": where,
                       "params": point_params, "budget": values.get("budget", base_budget),
                       "sampling": point_sampling})
    return points


def _product(lists: list[list]) -> list[tuple]:
    out = [()]
    for values in lists:
        out = [(*head, v) for head in out for v in values]
    return out


def _baseline_key(sampling) -> tuple:
    return GREEDY_KEY if sampling.greedy else (sampling.temperature, sampling.top_p, sampling.seed)


def _baseline_label(key: tuple) -> str:
    return BASELINE if key == GREEDY_KEY else f"{BASELINE}@T={key[0]:g},top_p={key[1]:g},seed={key[2]}"


def _item(prompt, number: int) -> dict:
    from specviz.runtime.prompts import as_messages

    if isinstance(prompt, str):
        return {"id": f"prompt-{number}", "category": "prompt", "messages": as_messages(prompt)}
    if not isinstance(prompt, dict) or not ({"messages", "prompt"} & prompt.keys()):
        raise SpecvizError(f"Prompt {number} of the sweep needs \"messages\" or \"prompt\".")
    return {**prompt, "id": str(prompt.get("id", f"prompt-{number}")),
            "category": str(prompt.get("category", "prompt")),
            "messages": as_messages(prompt.get("messages") or prompt["prompt"])}


# ---- running it ------------------------------------------------------------------------------------
def _row(item: dict, run: "RunResult", reference: "RunResult", threshold: float, greedy: bool) -> dict:
    """One run against greedy ar's output: the token diff, where it first differs, and (greedy) the verdict."""
    from specviz.engine.divergence import classify, first_difference
    from specviz.engine.token_diff import token_diff
    from specviz.records.notes import ReSpecNote
    from specviz.records.status import NodeStatus

    diff = token_diff(reference.output_ids, run.output_ids)
    verdict = (classify(reference.output_ids, reference.margins, run.output_ids, run.margins,
                        threshold, run.lossless_declared).verdict if greedy else "sampled")
    tokens, wall, records = run.new_tokens, run.wall_s, run.records
    return {"id": item["id"], "category": item["category"], "new_tokens": tokens, "steps": run.steps,
            "mat": round(tokens / run.steps, 3) if run.steps else 0.0, "wall_s": round(wall, 4),
            "tokens_per_s": round(tokens / wall, 3) if wall else 0.0, "differing": diff.differing,
            "differing_fraction": round(diff.differing / tokens, 4) if tokens else 0.0,
            "first_difference": first_difference(reference.output_ids, run.output_ids), "verdict": verdict,
            "fired": sum(note.trigger.fired for r in records if (note := r.note(ReSpecNote))),
            "retrieval_steps": sum(note.drafted_by == "retrieval" for r in records if (note := r.note(ReSpecNote))),
            "relaxed": sum(n.status is NodeStatus.RELAXED for r in records for n in r.nodes),
            "draft_ms": round(sum(r.timings_ms["draft"] for r in records), 3),
            "forward_ms": round(sum(r.timings_ms["forward"] for r in records), 3)}


def runs_needed(method: str, axes, params: dict | None = None, budget="auto",
                sampling: "SamplingSettings | None" = None, prompts: int = 1) -> int:
    """Every generation run_grid makes for this grid on this many prompts: the untimed warm-ups (ar's and each
    point's), and per prompt greedy ar, ar at each distinct sampled setting and every point (what a limit on a
    sweep's size counts). Checks the grid as grid_points does; needs no model."""
    points = grid_points(method, axes, params, budget, sampling, prompts=prompts)
    keys = {_baseline_key(p["sampling"]) for p in points if not p["sampling"].greedy}
    return 1 + len(points) + prompts * (1 + len(keys) + len(points))


def run_grid(lm: "LoadedModel", prompts: list, method: str, axes, max_new_tokens: int = 64,
             params: dict | None = None, budget="auto", draft: "LoadedModel | None" = None,
             sampling: "SamplingSettings | None" = None,
             progress: Callable[[int, int, str], None] | None = None) -> dict:
    """The method at every grid point on every prompt (suite items {"id", "category", "messages" | "prompt",
    optional "max_new_tokens"}, or plain texts), interleaved per prompt after greedy `ar` (the lossless
    reference) and `ar` at each distinct sampled setting (the speed baseline). axes: parse_axes's output
    (or 'NAME=V1,...' strings, or {"name", "values"} dicts); params, budget and sampling (None: greedy):
    the fixed settings, which an axis of the same name overrides. Everything is checked before the first
    run. progress(done, total, label) after each run. Returns {"method", "axes": [{"name", "values"}],
    "fixed", "points": per point over all prompts, "rows": per point and prompt, "baselines": the ar runs
    per prompt, "categories": {category, ..., "ALL": {"ar" (and "ar@..." per sampled setting) and each
    point's label: the same totals}}}."""
    from specviz.accept.sampling import SamplingSettings
    from specviz.engine.divergence import tie_threshold
    from specviz.engine.run import run_method, warm_up
    from specviz.runtime.prompts import PromptText, encode
    from specviz.methods import get_method

    max_new_tokens = Param("max_new_tokens", 64, 1, 100_000, int).coerce(max_new_tokens)
    items = [_item(p, n) for n, p in enumerate(prompts or [], start=1)]
    points = grid_points(method, axes, params, budget, sampling, prompts=len(items))
    names = list(points[0]["values"])
    spec = get_method(method)
    greedy = SamplingSettings()
    keys = list(dict.fromkeys(_baseline_key(p["sampling"]) for p in points if not p["sampling"].greedy))
    threshold = tie_threshold(lm.dtype)
    encoded = [(item, encode(lm.tokenizer, item["messages"], lm.max_context), PromptText.of(item["messages"]))
               for item in items]  # a prompt too long for the context is refused here, before any run

    # untimed warm-ups, every point's own: a measured choice's first tries are shared by the process's later
    # sessions of one setting, so they would land on the first point of that setting and slow only it
    first_ids, first_prompt = encoded[0][1], encoded[0][2]
    warm_up(lm, BASELINE, first_prompt, prompt_ids=first_ids, draft=draft)
    for point in points:
        warm_up(lm, method, first_prompt, prompt_ids=first_ids, params=point["params"], budget=point["budget"],
                sampling=point["sampling"], draft=draft)

    total, done = len(items) * (1 + len(keys) + len(points)), 0
    rows, baselines = [], []

    def advance(label: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    for item, prompt_ids, prompt in encoded:
        limit = int(item.get("max_new_tokens", max_new_tokens))

        def run(name: str, params: dict, budget, sampling: "SamplingSettings") -> "RunResult":
            return run_method(lm, name, prompt, prompt_ids=prompt_ids, params=params, budget=budget,
                              sampling=sampling, max_new_tokens=limit, draft=draft)

        reference = run(BASELINE, {}, "auto", greedy)
        runs = {GREEDY_KEY: reference}
        baselines.append({"label": BASELINE, "temperature": 0.0, "top_p": 1.0, "seed": 0,
                          **_row(item, reference, reference, threshold, True)})
        advance(f"{item['id']}: {BASELINE}")
        for key in keys:
            runs[key] = run(BASELINE, {}, "auto", SamplingSettings(*key))
            baselines.append({"label": _baseline_label(key), "temperature": key[0], "top_p": key[1], "seed": key[2],
                              **_row(item, runs[key], reference, threshold, False)})
            advance(f"{item['id']}: {_baseline_label(key)}")
        for index, point in enumerate(points):
            row = _row(item, run(method, point["params"], point["budget"], point["sampling"]), reference,
                       threshold, point["sampling"].greedy)
            base_tps = runs[_baseline_key(point["sampling"])].tokens_per_s
            row["speedup"] = round(row["tokens_per_s"] / base_tps, 3) if base_tps else 0.0
            rows.append({"point": index, **point["values"], **row})
            advance(f"{item['id']}: {point['where']}")

    categories, summaries = {}, []
    point_groups = by_category(rows)
    for category, category_baselines in by_category(baselines).items():
        base_rows = {key: [b for b in category_baselines if b["label"] == _baseline_label(key)]
                     for key in [GREEDY_KEY, *keys]}
        entries = {_baseline_label(key): totals(group, group) for key, group in base_rows.items()}
        summaries = []
        for index, point in enumerate(points):
            aggregate = totals([r for r in point_groups[category] if r["point"] == index],
                               base_rows[_baseline_key(point["sampling"])])
            entries[point["label"]] = aggregate
            summaries.append({**point["values"], "label": point["label"], **aggregate})
        categories[category] = entries
    return {"method": method,
            "axes": [{"name": name, "values": list(dict.fromkeys(p["values"][name] for p in points))}
                     for name in names],
            "fixed": _fixed(spec, points[0], names, max_new_tokens, draft),
            "points": summaries, "rows": rows, "baselines": baselines, "categories": categories}


def _fixed(spec, point: dict, names: list[str], max_new_tokens: int, draft) -> dict:
    """The settings every point shares: the method's other parameters, the run settings not varied."""
    fixed = {k: v for k, v in point["params"].items() if k not in names}
    settings = {"budget": point["budget"], **_as_kwargs(point["sampling"])}
    fixed.update({k: v for k, v in settings.items() if k not in names})
    fixed["max_new_tokens"] = max_new_tokens
    if spec.uses_draft_model:
        fixed["draft_model"] = draft.name if draft is not None else "self (target weights)"
    return fixed


# ---- showing it ------------------------------------------------------------------------------------
POINT_COLUMNS = ["mat", "tokens_per_s", "speedup", "differing_fraction", "identical", "verdict", "runs",
                 "new_tokens", "steps", "wall_s", "trigger_rate", "retrieval_rate", "relaxed", "draft_ms_per_step",
                 "forward_ms_per_step"]
ROW_COLUMNS = ["new_tokens", "steps", "mat", "wall_s", "tokens_per_s", "speedup", "differing", "differing_fraction",
               "first_difference", "verdict"]


def _csv(header: list[str], lines: list[list]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(lines)
    return out.getvalue()


def _names(report: dict) -> list[str]:
    return [axis["name"] for axis in report["axes"]]


def grid_csv(report: dict) -> str:
    """A header, then one line per grid point (totals over all prompts): the axis values, then the metrics."""
    names = _names(report)
    return _csv(names + POINT_COLUMNS, [[p[n] for n in names] + [p[c] for c in POINT_COLUMNS]
                                        for p in report["points"]])


def grid_rows_csv(report: dict) -> str:
    """A header, then one line per grid point and prompt."""
    names = _names(report)
    return _csv(["id", "category", *names, *ROW_COLUMNS],
                [[r["id"], r["category"], *(r[n] for n in names), *(r[c] for c in ROW_COLUMNS)]
                 for r in report["rows"]])


def _cell(metric: str, value) -> str:
    if value is None:
        return ""
    if metric == "differing_fraction":
        return f"{100 * value:.1f}%"
    if metric == "speedup":
        return f"{value:.2f}x"
    return f"{value:.1f}" if metric == "tokens_per_s" else f"{value:.2f}"


def grid_figure(report: dict | None, metric: str = "speedup"):
    """A heatmap of the metric over two axes (first axis up, second across, each cell annotated), or a line
    over one axis; metric is one of METRICS. An empty figure when there is no report yet."""
    import plotly.graph_objects as go

    if metric not in METRICS:
        raise SpecvizError(f"Unknown sweep metric '{metric}'; choose one of {', '.join(METRICS)}.")
    figure = go.Figure()
    layout = dict(height=420, font=dict(size=14), margin=dict(l=10, r=10, t=56, b=10), plot_bgcolor="white",
                  paper_bgcolor="white", hoverlabel=dict(align="left"))
    if not report or not report.get("points"):
        figure.update_layout(title=dict(text="Grid sweep: no results yet", font=dict(size=16)), **layout)
        return figure
    axes = report["axes"]
    title = f"{report['method']}: {METRICS[metric]} by {' and '.join(a['name'] for a in axes)}"
    if len(axes) == 2:
        first, second = axes
        lookup = {(_fmt(p[first["name"]]), _fmt(p[second["name"]])): p[metric] for p in report["points"]}
        ys, xs = [_fmt(v) for v in first["values"]], [_fmt(v) for v in second["values"]]
        z = [[lookup.get((y, x)) for x in xs] for y in ys]
        figure.add_trace(go.Heatmap(
            z=z, x=xs, y=ys, text=[[_cell(metric, v) for v in row] for row in z], texttemplate="%{text}",
            textfont=dict(size=14), colorscale="Reds" if metric == "differing_fraction" else "Viridis",
            colorbar=dict(title=dict(text=metric)),
            hovertemplate=f"{first['name']}=%{{y}}<br>{second['name']}=%{{x}}<br>{metric} %{{text}}<extra></extra>"))
        figure.update_xaxes(title_text=second["name"], type="category")
        figure.update_yaxes(title_text=first["name"], type="category")
    else:
        (axis,) = axes
        xs = [_fmt(p[axis["name"]]) for p in report["points"]]
        ys = [p[metric] for p in report["points"]]
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers+text", text=[_cell(metric, v) for v in ys],
                                    textposition="top center", name=metric,
                                    hovertemplate=f"{axis['name']}=%{{x}}<br>{metric} %{{text}}<extra></extra>"))
        if metric == "speedup":
            figure.add_hline(y=1.0, line_dash="dot", line_color="#888", annotation_text="ar")
        figure.update_xaxes(title_text=axis["name"], type="category", gridcolor="#eee")
        figure.update_yaxes(title_text=METRICS[metric], gridcolor="#eee", zeroline=False)
    figure.update_layout(title=dict(text=title, font=dict(size=16)), **layout)
    return figure


def format_grid(report: dict) -> str:
    """A text table: per category (only ALL when the prompts share one) the ar baseline(s), then one line
    per grid point."""
    names = _names(report)
    fixed = ", ".join(f"{k}={_fmt(v)}" for k, v in report["fixed"].items())
    header = ["category", *names, "MAT", "tok/s", "vs ar", "differ", "verdict", "trigger", "retr", "relaxed",
              "draft ms", "fwd ms"]
    lines = [header]
    categories = report["categories"]
    shown = categories if len(categories) > 2 else {"ALL": categories["ALL"]}
    points = {p["label"]: p for p in report["points"]}
    for category, entries in shown.items():
        for label, s in entries.items():
            point = points.get(label)
            axis_cells = [_fmt(point[n]) for n in names] if point is not None else [label] + [""] * (len(names) - 1)
            lines.append([category, *axis_cells, f"{s['mat']:.2f}", f"{s['tokens_per_s']:.2f}",
                          f"{s['speedup']:.2f}x", f"{100 * s['differing_fraction']:.1f}%", s["verdict"],
                          f"{100 * s['trigger_rate']:.1f}%", f"{100 * s['retrieval_rate']:.1f}%", str(s["relaxed"]),
                          f"{s['draft_ms_per_step']:.1f}", f"{s['forward_ms_per_step']:.1f}"])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    table = [" ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                      for i, (cell, w) in enumerate(zip(line, widths))) for line in lines]
    return "\n".join([f"{report['method']} over {' x '.join(names)} (fixed: {fixed})", *table])
