"""Grid sweep: one method over one or two axes (its parameters, or the run settings budget, temperature,
top_p and seed), interleaved per prompt after plain greedy `ar` (the lossless reference) and, for sampled
points, `ar` at the same sampling settings (the speed baseline).

Per point and prompt: new tokens, steps, MAT, wall seconds, tokens/s, speedup against `ar` at the same
sampling, the share of output tokens that differ from greedy `ar`'s output and where the first one is,
and for greedy points the verdict of engine.divergence (yes / tie@k / lossy@k / MISMATCH). Every value and
every combination is checked before anything runs, and the grid's size is capped (grid points, and
points x prompts) before any model is needed: this module imports the model side (torch) only where it
runs.

The records: SweepAxis and GridPoint (the grid, checked), SweepRow (one timed run on one prompt), SweepTotals (a
group of runs' totals, studies.totals), SweepProgress and SweepReport (what run_grid yields). The tables and CSV
are here; the figure is render.sweep_figures'."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Union

from specviz.params import Param
from specviz.errors import SpecvizError, quoted
from specviz.studies.suite import SuiteItem
from specviz.studies.progress_events import final_result
from specviz.studies.totals import totals

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
BASELINE = "ar"              # as the bench (benches.suite_bench): the plain greedy reference, and the speed baseline
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
            raise SpecvizError(f"--vary takes NAME=V1,V2,... (e.g. tau=0,5), got {quoted(spec, 80)}.")
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
            raise SpecvizError(f"A sweep axis is a name and its values, got {quoted(axis, 80)}.")
        if isinstance(values, str):
            values = [v.strip() for v in values.split(",")]
        out.append((_axis_name(name), list(values or [])))
    return _checked_shape(out)


def format_value(value) -> str:
    """An axis value as the tables, the CSV's labels and the figures show it (floats without trailing zeros)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _as_kwargs(sampling) -> dict:
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed}


# ---- the records ---------------------------------------------------------------------------------------
Pairs = tuple[tuple[str, object], ...]  # (name, value) pairs, in order


@dataclass(frozen=True)
class SweepAxis:
    """One axis of the grid, checked."""
    name: str          # a parameter of the method, or a run setting (RUN_SETTINGS)
    values: tuple      # its values in the order given, coerced (int, float, text; a budget's "auto")


@dataclass(frozen=True)
class GridPoint:
    """One point of the grid, checked alone and as a combination (grid_points): what the method runs with."""
    values: Pairs                  # (axis name, value) per axis, in the axes' order
    params: Pairs                  # the method's resolved parameters here, (name, value) in the method's order
    budget: int | str              # draft nodes a step verifies here (1..BUDGET_MAX), or "auto"
    sampling: "SamplingSettings"   # temperature, top_p and seed here

    def value(self, name: str):
        return dict(self.values)[name]

    @property
    def label(self) -> str:
        """The axis values, e.g. "4, 2" (the point's name in tables and per-category totals)."""
        return ", ".join(format_value(v) for _, v in self.values)

    @property
    def where(self) -> str:
        """The axis names and values, e.g. "budget=4, max_breadth=2" (messages, progress)."""
        return ", ".join(f"{k}={format_value(v)}" for k, v in self.values)


@dataclass(frozen=True)
class SweepRow:
    """One timed run on one prompt, a grid point's or an ar baseline's, against greedy ar's output there."""
    id: str                        # the prompt's suite id
    category: str                  # its suite category (a page or --prompt text: "prompt")
    label: str                     # the grid point's label ("4, 2"), or the baseline's ("ar", "ar@T=0.8,top_p=1,seed=3")
    point: int | None              # the grid point's index in the grid (SweepReport.points); None: an ar run
    values: Pairs                  # the grid point's (axis name, value) pairs; () for an ar run
    sampling: "SamplingSettings"   # temperature, top_p and seed of the run
    new_tokens: int                # tokens generated
    steps: int                     # verify steps (target forwards over a tree)
    mat: float                     # mean accepted tokens per step: new_tokens / steps (3 decimals)
    wall_s: float                  # prefill and steps, seconds (4 decimals)
    tokens_per_s: float            # new_tokens / wall_s (3 decimals)
    speedup: float                 # tokens/s over ar's at the same sampling on this prompt (3 decimals); ar: 1.0
    differing: int                 # output tokens that differ from greedy ar's (engine.token_diff)
    differing_fraction: float      # differing / new_tokens (4 decimals)
    first_difference: int | None   # index of the first output token unlike greedy ar's; None: identical
    verdict: str                   # greedy: engine.divergence's yes / tie@k / lossy@k / MISMATCH; sampled: "sampled"
    fired: int                     # steps where ReSpec's trigger fired
    retrieval_steps: int           # steps ReSpec drafted by retrieval
    relaxed: int                   # nodes accepted by the relaxed rule (ReSpec), over all steps
    draft_ms: float                # drafting time over all steps, ms (3 decimals)
    forward_ms: float              # verify forward time over all steps, ms (3 decimals)

    def figures(self) -> dict:
        """Every field by name but the axis values and the sampling settings (studies.totals's input; JSON)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("sampling", "values")}


@dataclass(frozen=True)
class SweepTotals:
    """Totals over a group of runs (studies.totals): one grid point's or one ar setting's, in one category or
    over every prompt."""
    label: str                     # the grid point's label, or the ar setting's ("ar", "ar@T=...")
    values: Pairs                  # the grid point's (axis name, value) pairs; () for ar
    runs: int                      # runs summed (one per prompt)
    new_tokens: int                # tokens generated, summed
    steps: int                     # verify steps, summed
    mat: float                     # new_tokens / steps (3 decimals)
    wall_s: float                  # seconds, summed (4 decimals)
    tokens_per_s: float            # new_tokens / wall_s (3 decimals)
    speedup: float                 # tokens_per_s over ar's (same sampling) on the same prompts (3 decimals)
    differing_fraction: float      # tokens differing from greedy ar's / new_tokens (4 decimals)
    identical: int                 # runs whose output is greedy ar's
    verdict: str                   # the worst over the runs (studies.totals.worst_verdict)
    trigger_rate: float            # ReSpec trigger firings per step (4 decimals)
    retrieval_rate: float          # ReSpec retrieval-drafted steps per step (4 decimals)
    relaxed: int                   # nodes accepted by the relaxed rule, summed
    draft_ms_per_step: float       # drafting ms per step (2 decimals)
    forward_ms_per_step: float     # verify forward ms per step (2 decimals)

    @classmethod
    def of(cls, label: str, values: Pairs, rows: list[SweepRow], baseline: list[SweepRow]) -> "SweepTotals":
        figures = totals([r.figures() for r in rows], [b.figures() for b in baseline])
        return cls(label, values, **{f.name: figures[f.name] for f in fields(cls) if f.name not in ("label", "values")})

    def figures(self) -> dict:
        """The totals by name (a CSV line; JSON), without the label and the axis values."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("label", "values")}


@dataclass(frozen=True)
class SweepProgress:
    """A sweep's progress, after each timed run."""
    done: int                      # timed runs finished (1..total); the untimed warm-ups are not counted
    total: int                     # timed runs in all: per prompt greedy ar, ar at each sampled setting, each point
    label: str                     # the run just finished: "<prompt id>: ar" or "<prompt id>: budget=4, ..."


@dataclass(frozen=True)
class SweepReport:
    """A finished sweep (run_grid's last event)."""
    method: str                              # the method swept
    axes: tuple[SweepAxis, ...]              # one or two, in the order given (the first is the heatmap's rows)
    fixed: Pairs                             # what every point shares: the method's other parameters, the run
                                             # settings not varied, max_new_tokens (and draft_model, if it uses one)
    points: tuple[SweepTotals, ...]          # per grid point, in grid order: totals over every prompt
    rows: tuple[SweepRow, ...]               # per prompt (in the order given), per grid point
    baselines: tuple[SweepRow, ...]          # per prompt: greedy ar, then ar at each sampled setting
    categories: tuple[tuple[str, tuple[SweepTotals, ...]], ...]  # per category (first seen), then "ALL":
                                             # each ar setting's totals, then each grid point's
    prompts: int                             # prompts swept

    def category(self, name: str) -> tuple[SweepTotals, ...]:
        return dict(self.categories)[name]

    @property
    def names(self) -> list[str]:
        return [axis.name for axis in self.axes]

    def to_dict(self) -> dict:
        """The report as JSON takes it (the CLI's --json)."""
        return {"method": self.method,
                "axes": [{"name": axis.name, "values": list(axis.values)} for axis in self.axes],
                "fixed": dict(self.fixed),
                "points": [{**dict(p.values), "label": p.label, **p.figures()} for p in self.points],
                "rows": [{**r.figures(), **dict(r.values)} for r in self.rows],
                "baselines": [{**r.figures(), **_as_kwargs(r.sampling)} for r in self.baselines],
                "categories": {name: {t.label: t.figures() for t in entries} for name, entries in self.categories},
                "prompts": self.prompts}


SweepEvent = Union[SweepProgress, SweepReport]


def last_report(events: Iterable[SweepEvent], progress: Callable[[SweepProgress], None] | None = None) -> SweepReport:
    """The report that ends a sweep's events (run_grid's, or a model call's results), handing each progress
    event to progress on the way. SpecvizError when the events end without one."""
    return final_result(events, SweepProgress, SweepReport, "sweep", progress)


# ---- the grid, checked without a model (continued) -----------------------------------------------------
def grid_points(method: str, axes, params: dict | None = None, budget="auto",
                sampling: "SamplingSettings | None" = None, prompts: int | None = None) -> list[GridPoint]:
    """Every point of the grid, checked: each value alone (the parameter's range, parse_budget,
    SamplingSettings.checked), then each combination (the method's cross-parameter checks and its
    check_sampling). params, budget, sampling (None: greedy): the fixed settings, which an axis of the same
    name overrides. prompts: how many prompts it will run on (MAX_SWEEP_RUNS). Needs no model."""
    from specviz.accept.sampling import SamplingSettings
    from specviz.methods import get_method
    from specviz.tree.budget import parse_budget

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
                raise SpecvizError(f"{name} lists the value {format_value(value)} twice.")
        coerced.append((name, parsed))
    points = []
    for combination in _product([values for _, values in coerced]):
        values = tuple((name, value) for (name, _), value in zip(coerced, combination))
        varied_values = dict(values)
        where = ", ".join(f"{k}={format_value(v)}" for k, v in values)
        try:
            point_params = spec.resolve_params({**fixed, **{k: v for k, v in values if k in by_name}})
            point_sampling = SamplingSettings.checked(**{**_as_kwargs(sampling),
                                                        **{k: v for k, v in values if k in SAMPLING_AXES}})
            spec.check_sampling(point_params, point_sampling)
        except SpecvizError as error:
            raise SpecvizError(f"The sweep point {where} is refused: {error}") from None
        points.append(GridPoint(values, tuple(point_params.items()), varied_values.get("budget", base_budget),
                                point_sampling))
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


def _item(prompt, number: int) -> SuiteItem:
    if isinstance(prompt, SuiteItem):
        return prompt
    if isinstance(prompt, str):
        return SuiteItem.of(prompt, id=f"prompt-{number}")
    raise SpecvizError(f"Prompt {number} of the sweep is a suite item or a text, got {type(prompt).__name__}.")


def runs_needed(method: str, axes, params: dict | None = None, budget="auto",
                sampling: "SamplingSettings | None" = None, prompts: int = 1) -> int:
    """Every generation run_grid makes for this grid on this many prompts: the untimed warm-ups (ar's and each
    point's), and per prompt greedy ar, ar at each distinct sampled setting and every point (what a limit on a
    sweep's size counts). Checks the grid as grid_points does; needs no model."""
    points = grid_points(method, axes, params, budget, sampling, prompts=prompts)
    keys = {_baseline_key(p.sampling) for p in points if not p.sampling.greedy}
    return 1 + len(points) + prompts * (1 + len(keys) + len(points))


# ---- running it ------------------------------------------------------------------------------------
def _row(item: SuiteItem, label: str, point: int | None, values: Pairs, sampling: "SamplingSettings",
         run: "RunResult", reference: "RunResult", baseline: "RunResult", threshold: float) -> SweepRow:
    """One run against greedy ar's output (the token diff, where it first differs, and, greedy, the verdict) and
    against baseline's speed (ar at the same sampling on the same prompt)."""
    from specviz.engine.divergence import classify, first_difference
    from specviz.engine.token_diff import token_diff
    from specviz.records.notes import ReSpecNote
    from specviz.records.status import NodeStatus

    diff = token_diff(reference.output_ids, run.output_ids)
    verdict = (classify(reference.output_ids, reference.margins, run.output_ids, run.margins,
                        threshold, run.lossless_declared).verdict if sampling.greedy else "sampled")
    tokens, wall, records = run.new_tokens, run.wall_s, run.records
    notes = [note for r in records if (note := r.note(ReSpecNote))]
    return SweepRow(
        id=item.id, category=item.category, label=label, point=point, values=values, sampling=sampling,
        new_tokens=tokens, steps=run.steps, mat=round(tokens / run.steps, 3) if run.steps else 0.0,
        wall_s=round(wall, 4), tokens_per_s=round(tokens / wall, 3) if wall else 0.0,
        speedup=round(run.tokens_per_s / baseline.tokens_per_s, 3) if baseline.tokens_per_s else 0.0,
        differing=diff.differing, differing_fraction=round(diff.differing / tokens, 4) if tokens else 0.0,
        first_difference=first_difference(reference.output_ids, run.output_ids), verdict=verdict,
        fired=sum(note.trigger.fired for note in notes),
        retrieval_steps=sum(note.drafted_by == "retrieval" for note in notes),
        relaxed=sum(n.status is NodeStatus.RELAXED for r in records for n in r.nodes),
        draft_ms=round(sum(r.timings_ms.draft for r in records), 3),
        forward_ms=round(sum(r.timings_ms.forward for r in records), 3))


def run_grid(lm: "LoadedModel", prompts: list[SuiteItem | str], method: str, axes, max_new_tokens: int = 64,
             params: dict | None = None, budget="auto", draft: "LoadedModel | None" = None,
             sampling: "SamplingSettings | None" = None) -> Iterator[SweepEvent]:
    """The method at every grid point on every prompt (suite items, or plain texts), interleaved per prompt after
    greedy `ar` (the lossless reference) and `ar` at each distinct sampled setting (the speed baseline). axes:
    parse_axes's output (or 'NAME=V1,...' strings, or {"name", "values"} dicts); params, budget and sampling
    (None: greedy): the fixed settings, which an axis of the same name overrides; an item's own max_new_tokens
    overrides max_new_tokens. Everything (the grid, every prompt's length) is checked here, before the first
    run: SpecvizError. Returns the events: a SweepProgress after each timed run, then the SweepReport
    (last_report reads them)."""
    from specviz.engine.divergence import tie_threshold
    from specviz.runtime.prompts import PromptText, encode

    max_new_tokens = Param("max_new_tokens", 64, 1, 100_000, int).coerce(max_new_tokens)
    items = [_item(p, n) for n, p in enumerate(prompts or [], start=1)]
    points = grid_points(method, axes, params, budget, sampling, prompts=len(items))
    threshold = tie_threshold(lm.dtype)
    encoded = [(item, encode(lm.tokenizer, item.messages, lm.max_context), PromptText.of(item.messages))
               for item in items]  # a prompt too long for the context is refused here, before any run
    return _grid_events(lm, encoded, method, points, max_new_tokens, draft, threshold)


def _grid_events(lm, encoded: list, method: str, points: list[GridPoint], max_new_tokens: int, draft,
                 threshold: float) -> Iterator[SweepEvent]:
    from specviz.accept.sampling import SamplingSettings
    from specviz.engine.run import run_method, warm_up
    from specviz.methods import get_method

    spec = get_method(method)
    greedy = SamplingSettings()
    keys = list(dict.fromkeys(_baseline_key(p.sampling) for p in points if not p.sampling.greedy))

    # untimed warm-ups, every point's own: a measured choice's first tries are shared by the process's later
    # sessions of one setting, so they would land on the first point of that setting and slow only it
    first_ids, first_prompt = encoded[0][1], encoded[0][2]
    warm_up(lm, BASELINE, first_prompt, prompt_ids=first_ids, draft=draft)
    for point in points:
        warm_up(lm, method, first_prompt, prompt_ids=first_ids, params=dict(point.params), budget=point.budget,
                sampling=point.sampling, draft=draft)

    total, done = len(encoded) * (1 + len(keys) + len(points)), 0
    rows: list[SweepRow] = []
    baselines: list[SweepRow] = []
    for item, prompt_ids, prompt in encoded:
        limit = item.limit(max_new_tokens)

        def run(name: str, params: dict, budget, sampling: "SamplingSettings") -> "RunResult":
            return run_method(lm, name, prompt, prompt_ids=prompt_ids, params=params, budget=budget,
                              sampling=sampling, max_new_tokens=limit, draft=draft)

        reference = run(BASELINE, {}, "auto", greedy)
        runs = {GREEDY_KEY: reference}
        baselines.append(_row(item, BASELINE, None, (), greedy, reference, reference, reference, threshold))
        done += 1
        yield SweepProgress(done, total, f"{item.id}: {BASELINE}")
        for key in keys:
            at = SamplingSettings(*key)
            runs[key] = run(BASELINE, {}, "auto", at)
            baselines.append(_row(item, _baseline_label(key), None, (), at, runs[key], reference, runs[key],
                                  threshold))
            done += 1
            yield SweepProgress(done, total, f"{item.id}: {_baseline_label(key)}")
        for index, point in enumerate(points):
            result = run(method, dict(point.params), point.budget, point.sampling)
            rows.append(_row(item, point.label, index, point.values, point.sampling, result, reference,
                             runs[_baseline_key(point.sampling)], threshold))
            done += 1
            yield SweepProgress(done, total, f"{item.id}: {point.where}")

    categories = []
    for category in [*dict.fromkeys(item.category for item, _, _ in encoded), "ALL"]:
        mine = [r for r in rows if category in ("ALL", r.category)]
        base = {key: [b for b in baselines if category in ("ALL", b.category) and b.label == _baseline_label(key)]
                for key in [GREEDY_KEY, *keys]}
        entries = [SweepTotals.of(_baseline_label(key), (), group, group) for key, group in base.items()]
        entries += [SweepTotals.of(point.label, point.values, [r for r in mine if r.point == index],
                                   base[_baseline_key(point.sampling)])
                    for index, point in enumerate(points)]
        categories.append((category, tuple(entries)))
    names = [name for name, _ in points[0].values]
    yield SweepReport(
        method=method,
        axes=tuple(SweepAxis(name, tuple(dict.fromkeys(p.value(name) for p in points))) for name in names),
        fixed=_fixed(spec, points[0], names, max_new_tokens, draft),
        points=categories[-1][1][1 + len(keys):], rows=tuple(rows), baselines=tuple(baselines),
        categories=tuple(categories), prompts=len(encoded))


def _fixed(spec, point: GridPoint, names: list[str], max_new_tokens: int, draft) -> Pairs:
    """The settings every point shares: the method's other parameters, the run settings not varied."""
    fixed = {k: v for k, v in point.params if k not in names}
    settings = {"budget": point.budget, **_as_kwargs(point.sampling)}
    fixed.update({k: v for k, v in settings.items() if k not in names})
    fixed["max_new_tokens"] = max_new_tokens
    if spec.uses_draft_model:
        fixed["draft_model"] = draft.name if draft is not None else "self (target weights)"
    return tuple(fixed.items())


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


def grid_csv(report: SweepReport) -> str:
    """A header, then one line per grid point (totals over all prompts): the axis values, then the metrics."""
    return _csv(report.names + POINT_COLUMNS,
                [[v for _, v in p.values] + [getattr(p, c) for c in POINT_COLUMNS] for p in report.points])


def grid_rows_csv(report: SweepReport) -> str:
    """A header, then one line per grid point and prompt."""
    return _csv(["id", "category", *report.names, *ROW_COLUMNS],
                [[r.id, r.category, *(v for _, v in r.values), *(getattr(r, c) for c in ROW_COLUMNS)]
                 for r in report.rows])


def format_grid(report: SweepReport) -> str:
    """A text table: per category (only ALL when the prompts share one) the ar baseline(s), then one line
    per grid point."""
    names = report.names
    fixed = ", ".join(f"{k}={format_value(v)}" for k, v in report.fixed)
    header = ["category", *names, "MAT", "tok/s", "vs ar", "differ", "verdict", "trigger", "retr", "relaxed",
              "draft ms", "fwd ms"]
    lines = [header]
    categories = report.categories
    shown = categories if len(categories) > 2 else categories[-1:]
    for category, entries in shown:
        for s in entries:
            axis_cells = ([format_value(v) for _, v in s.values] if s.values
                          else [s.label] + [""] * (len(names) - 1))
            lines.append([category, *axis_cells, f"{s.mat:.2f}", f"{s.tokens_per_s:.2f}",
                          f"{s.speedup:.2f}x", f"{100 * s.differing_fraction:.1f}%", s.verdict,
                          f"{100 * s.trigger_rate:.1f}%", f"{100 * s.retrieval_rate:.1f}%", str(s.relaxed),
                          f"{s.draft_ms_per_step:.1f}", f"{s.forward_ms_per_step:.1f}"])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    table = [" ".join(str(cell).ljust(w) if i == 0 else str(cell).rjust(w)
                      for i, (cell, w) in enumerate(zip(line, widths))) for line in lines]
    return "\n".join([f"{report.method} over {' x '.join(names)} (fixed: {fixed})", *table])
