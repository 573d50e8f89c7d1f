import csv
import dataclasses
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from specviz.accept.sampling import SamplingSettings
from specviz.engine.run import run_method
from specviz.studies.suite import SuiteItem, load_suite
from specviz.errors import SpecvizError
from specviz.studies.sweep_grid import (
    MAX_SWEEP_POINTS,
    MAX_SWEEP_RUNS,
    GridPoint,
    SweepAxis,
    SweepProgress,
    SweepReport,
    SweepRow,
    SweepTotals,
    format_grid,
    grid_csv,
    grid_points,
    grid_rows_csv,
    last_report,
    parse_axes,
    run_grid,
)
from specviz.lab.public_policy import Policy
from specviz.lab.sweep import Sweep
from specviz.lab.visitor_request import VisitorRequest
from specviz.render.sweep_figures import grid_figure

ROOT = Path(__file__).parent.parent
PAGE = {"model": "", "draft_model": "", "mode": "", "prompt": "Repeat exactly: sun moon star, sun moon star.",
        "method": "racer", "auto_budget": False, "budget": 8, "temperature": 0.0, "top_p": 1.0, "seed": 0}


def quiet(*args, **kwargs):  # gr.Progress outside an event
    pass


@pytest.fixture(scope="module")
def short_item():
    return [item for item in load_suite(ROOT / "assets/suite.jsonl") if item.id == "math-apples"]


@pytest.fixture(scope="module")
def grid(lm, short_item):
    events = list(run_grid(lm, short_item, "racer", parse_axes(["budget=4,8", "max_breadth=2,8"]), max_new_tokens=12))
    calls = []
    return last_report(events, calls.append), calls


def test_grid_2x2_is_lossless_at_temperature_0(grid):
    report, _ = grid
    assert report.axes == (SweepAxis("budget", (4, 8)), SweepAxis("max_breadth", (2, 8)))
    assert [p.values for p in report.points] == [(("budget", b), ("max_breadth", m)) for b in (4, 8) for m in (2, 8)]
    for point in report.points:
        assert point.differing_fraction == 0.0 and point.verdict == "yes" and point.runs == 1, point
    assert len(report.rows) == 4 and all(r.first_difference is None for r in report.rows)
    assert dict(report.fixed)["temperature"] == 0.0 and "budget" not in dict(report.fixed)
    assert report.category("ALL")[0].label == "ar" and report.category("ALL")[0].speedup == 1.0
    written = json.loads(json.dumps(report.to_dict()))  # the CLI's --json: the same layout as before the records
    assert written["axes"] == [{"name": "budget", "values": [4, 8]}, {"name": "max_breadth", "values": [2, 8]}]
    assert written["points"][2]["budget"] == 8 and written["points"][2]["label"] == "8, 2"
    assert set(written["categories"]["ALL"]) == {"ar", "4, 2", "4, 8", "8, 2", "8, 8"}
    assert written["rows"][0]["max_breadth"] == 2 and written["baselines"][0]["temperature"] == 0.0


def test_grid_figures_are_what_a_run_here_gives(lm, grid, short_item):
    """Each point's tokens, steps and MAT are what run_method gives on the same prompt and settings (greedy
    racer at a fixed budget is deterministic), its output is greedy ar's, and the speedups follow from the
    measured times: a row's against its prompt's ar row, a point's totals against ar's totals."""
    report, _ = grid
    (item,) = short_item
    ar = run_method(lm, "ar", item.messages, max_new_tokens=12)
    (reference,) = report.baselines
    assert (reference.new_tokens, reference.steps) == (ar.new_tokens, ar.steps) == (12, 12)
    points = grid_points("racer", parse_axes(["budget=4,8", "max_breadth=2,8"]))
    for point, row, totals in zip(points, report.rows, report.points):
        assert row.values == point.values == totals.values and row.label == point.label == totals.label
        run = run_method(lm, "racer", item.messages, params=dict(point.params), budget=point.budget,
                         max_new_tokens=12)
        assert run.output_ids == ar.output_ids
        assert (row.new_tokens, row.steps) == (run.new_tokens, run.steps), point.where
        assert row.mat == round(run.new_tokens / run.steps, 3) == totals.mat
        assert run.accepted_drafts == run.new_tokens - run.steps  # every step: its accepted drafts and one more
        assert (totals.new_tokens, totals.steps, totals.identical) == (row.new_tokens, row.steps, 1)
        assert row.tokens_per_s == pytest.approx(row.new_tokens / row.wall_s, rel=1e-3)
        assert row.speedup == pytest.approx((row.new_tokens / row.wall_s) / (reference.new_tokens / reference.wall_s),
                                            rel=1e-2)
        assert totals.speedup == pytest.approx(totals.tokens_per_s / report.category("ALL")[0].tokens_per_s, rel=1e-2)
        assert row.speedup == pytest.approx(totals.speedup, rel=1e-2)  # one prompt: the same ratio


def test_grid_csv_figure_and_table(grid):
    report, _ = grid
    lines = list(csv.reader(io.StringIO(grid_csv(report))))
    assert lines[0][:6] == ["budget", "max_breadth", "mat", "tokens_per_s", "speedup", "differing_fraction"]
    assert len(lines) == 5 and [line[:2] for line in lines[1:]] == [["4", "2"], ["4", "8"], ["8", "2"], ["8", "8"]]
    assert [float(line[2]) for line in lines[1:]] == [p.mat for p in report.points]
    rows = list(csv.reader(io.StringIO(grid_rows_csv(report))))
    assert rows[0][:4] == ["id", "category", "budget", "max_breadth"] and len(rows) == 5
    assert [int(r[4]) for r in rows[1:]] == [r.new_tokens for r in report.rows]
    figure = grid_figure(report)
    heat = figure.data[0]
    assert heat.type == "heatmap" and len(heat.z) == 2 and all(len(row) == 2 for row in heat.z)
    assert heat.z[1][0] == report.points[2].speedup and heat.text[1][0].endswith("x")
    assert "racer" in figure.layout.title.text and "speedup" in figure.layout.title.text
    assert grid_figure(report, "differing_fraction").data[0].text[0][0] == "0.0%"
    assert grid_figure(report, "mat").data[0].z[0][1] == report.points[1].mat
    with pytest.raises(SpecvizError, match="Unknown sweep metric"):
        grid_figure(report, "nope")
    assert "no results yet" in grid_figure(None).layout.title.text
    table = format_grid(report)
    assert "budget" in table and "max_breadth" in table and "differ" in table and len(table.splitlines()) == 7


def test_progress_is_one_typed_event_per_run(grid):
    _, calls = grid
    total = 1 + 4  # greedy ar, then the four points
    assert all(isinstance(c, SweepProgress) for c in calls)
    assert [c.done for c in calls] == list(range(1, total + 1)) and all(c.total == total for c in calls)
    assert calls[0].label.endswith(": ar") and "budget=8, max_breadth=8" in calls[-1].label


def test_sampled_axis_has_its_own_ar_baseline(lm, short_item):
    calls = []
    report = last_report(run_grid(lm, short_item, "racer", ["temperature=0,0.8"], max_new_tokens=8, budget=8,
                                  sampling=SamplingSettings(seed=3)), calls.append)
    assert len(calls) == 4 == calls[-1].total  # greedy ar, ar at 0.8, two points
    assert [b.label for b in report.baselines] == ["ar", "ar@T=0.8,top_p=1,seed=3"]
    greedy_ar, sampled_ar = report.baselines
    assert sampled_ar.sampling == SamplingSettings(0.8, 1.0, 3) and sampled_ar.verdict == "sampled"
    greedy, sampled = report.points
    assert greedy.verdict == "yes" and greedy.differing_fraction == 0.0
    assert sampled.verdict == "sampled"
    (item,) = short_item
    run = run_method(lm, "racer", item.messages, budget=8, sampling=SamplingSettings(0.8, 1.0, 3), max_new_tokens=8)
    greedy_row, sampled_row = report.rows
    # seeded acceptance: racer emits ar's draws for the seed, and its tree is a function of those tokens
    assert (sampled_row.new_tokens, sampled_row.steps) == (run.new_tokens, run.steps) == (8, run.steps)
    assert sampled_row.differing == sampled_ar.differing  # the same tokens as ar at the same sampling
    # the speed baseline of each point is ar at its own sampling
    assert sampled_row.speedup == pytest.approx(sampled_row.tokens_per_s / sampled_ar.tokens_per_s, rel=1e-2)
    assert greedy_row.speedup == pytest.approx(greedy_row.tokens_per_s / greedy_ar.tokens_per_s, rel=1e-2)
    assert grid_figure(report, "mat").data[0].type == "scatter"


def test_refusals_before_anything_runs():
    with pytest.raises(SpecvizError) as error:  # parse_axes needs no model: nothing can have run
        parse_axes(["budget=" + ",".join(map(str, range(1, 101))), "seed=" + ",".join(map(str, range(100)))])
    assert str(MAX_SWEEP_POINTS) in str(error.value) and "10000" in str(error.value)
    with pytest.raises(SpecvizError, match="10000"):  # run_grid refuses it before touching the model
        run_grid(None, [SuiteItem.of("hi", id="a", category="c")], "racer",
                 [("budget", list(range(1, 101))), ("seed", list(range(100)))])
    with pytest.raises(SpecvizError, match="a suite item or a text"):
        run_grid(None, [{"id": "a", "category": "c", "prompt": "hi"}], "racer", ["budget=4"])
    for specs, expected in [(["tau"], "--vary takes NAME=V1"), (["tau=1,,2"], "empty value"),
                            (["a=1", "b=2", "c=3"], "one or two parameters"), (["tau=1", "tau=2"], "varied twice"),
                            (["tau=1,1"], "twice"), ([], "at least one axis")]:
        with pytest.raises(SpecvizError, match=expected):
            parse_axes(specs)
    for method, specs, expected in [
            ("racer", ["nope=1"], "no parameter 'nope'"),
            ("racer", ["max_breadth=0,4"], "max_breadth must be between"),
            ("racer", ["budget=4,0"], "budget must be between"),
            ("racer", ["budget=4,4.0"], "twice"),
            ("racer", ["temperature=0,9"], "temperature must be between"),
            ("racer", ["top_p=0,1"], "top_p must be in"),
            ("racer", ["min_match=2,20"], "min_match must be between"),
            ("rapid", ["eta=0,1"], "point eta=1 is refused: eta has no effect at temperature 0"),
            ("rapid", ["temperature=0,0.8", "eta=0,2"], "point temperature=0, eta=2 is refused")]:
        with pytest.raises(SpecvizError, match=expected):
            grid_points(method, parse_axes(specs))
    assert len(grid_points("rapid", parse_axes(["eta=0,2"]), sampling=SamplingSettings(0.8))) == 2
    with pytest.raises(SpecvizError, match=f"at most {MAX_SWEEP_RUNS} runs.*4 x 101 = 404"):
        grid_points("racer", parse_axes(["budget=4,8", "max_breadth=2,8"]), prompts=101)


# ---- the records, without a model ------------------------------------------------------------------------
def test_grid_points_are_typed_and_frozen():
    points = grid_points("racer", parse_axes(["budget=4,auto", "temperature=0,0.5"]), {"max_breadth": 3},
                         sampling=SamplingSettings(seed=7))
    assert all(isinstance(p, GridPoint) for p in points) and len(points) == 4
    first, last = points[0], points[-1]
    assert first.values == (("budget", 4), ("temperature", 0.0)) and first.label == "4, 0"
    assert last.where == "budget=auto, temperature=0.5" and last.value("budget") == "auto"
    assert last.sampling == SamplingSettings(0.5, 1.0, 7) and dict(last.params)["max_breadth"] == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.budget = 8


def _row(point, label, wall_s, new_tokens=10, steps=5, differing=0, category="c", id="p"):
    return SweepRow(id=id, category=category, label=label, point=point, values=(("budget", 4),) if point == 0 else (),
                    sampling=SamplingSettings(), new_tokens=new_tokens, steps=steps, mat=new_tokens / steps,
                    wall_s=wall_s, tokens_per_s=new_tokens / wall_s, speedup=1.0, differing=differing,
                    differing_fraction=differing / new_tokens, first_difference=None if not differing else 3,
                    verdict="yes", fired=1, retrieval_steps=2, relaxed=0, draft_ms=5.0, forward_ms=10.0)


def test_totals_of_rows_against_their_baseline():
    rows = [_row(0, "4", 0.5), _row(0, "4", 0.25, new_tokens=6, steps=3, differing=2, id="q")]
    ar = [_row(None, "ar", 1.0, steps=10), _row(None, "ar", 1.0, new_tokens=6, steps=6, id="q")]
    totals = SweepTotals.of("4", (("budget", 4),), rows, ar)
    assert (totals.runs, totals.new_tokens, totals.steps, totals.identical) == (2, 16, 8, 1)
    assert totals.mat == 2.0 and totals.wall_s == 0.75 and totals.tokens_per_s == round(16 / 0.75, 3)
    assert totals.speedup == round((16 / 0.75) / (16 / 2.0), 3) and totals.differing_fraction == 0.125
    assert totals.trigger_rate == 0.25 and totals.retrieval_rate == 0.5 and totals.draft_ms_per_step == 1.25
    assert SweepTotals.of("ar", (), ar, ar).speedup == 1.0


def test_a_report_without_its_end_is_refused():
    from specviz.studies.static_study import StudyProgress, last_study

    with pytest.raises(SpecvizError, match="sweep ended without a result"):
        last_report([SweepProgress(1, 2, "p: ar")])
    with pytest.raises(SpecvizError, match="study ended without a result"):
        last_study([StudyProgress(1, 2, "page prompt")])
    with pytest.raises(TypeError):
        last_study([SweepProgress(1, 2, "p: ar")])  # a sweep's event is no study's
    with pytest.raises(TypeError):
        last_report([("progress", 1, 2, "p: ar")])  # the old tagged tuples are no event
    report = SweepReport("racer", (SweepAxis("budget", (4,)),), (("temperature", 0.0),), (), (), (),
                         (("ALL", ()),), 1)
    seen = []
    assert last_report([SweepProgress(1, 1, "p: ar"), report], seen.append) is report and len(seen) == 1


# ---- the suite's items ----------------------------------------------------------------------------------
def test_suite_items_are_typed():
    suite = load_suite(ROOT / "assets/suite.jsonl")
    assert all(isinstance(item, SuiteItem) for item in suite)
    chat = next(item for item in suite if item.is_chat)
    assert chat.messages[-1] == {"role": "user", "content": chat.text} and len(chat.messages) == 3
    chat.messages.append({"role": "user", "content": "x"})  # a fresh list each time: the item does not change
    assert len(chat.messages) == 3
    text = next(item for item in suite if item.id == "math-apples")
    assert text.messages == [{"role": "user", "content": text.prompt}] and text.limit(32) == 32
    long = next(item for item in suite if item.category == "long-context")
    assert long.max_new_tokens == 48 and long.limit(32) == 48 and long.without_limit().limit(32) == 32
    assert long.text.endswith(f"Question: {long.question} Answer briefly.") and long.reference
    for item in suite + load_suite(ROOT / "assets/heldout.jsonl"):  # JSON and back
        assert SuiteItem.from_dict(json.loads(json.dumps(item.to_dict())), ROOT / "assets") == item
    assert SuiteItem.of([{"role": "user", "content": "hi"}]) == SuiteItem("prompt", "prompt", (("user", "hi"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        text.category = "other"


@pytest.mark.parametrize("line, expected", [
    ("{not json", "is not valid JSON"),
    ('["a list"]', "a suite item is a JSON object"),
    ('{"category": "c", "prompt": "hi"}', 'needs an "id" and a "category"'),
    ('{"id": "a", "category": "c", "promt": "hi"}', "unknown key(s) 'promt'"),
    ('{"id": "a", "category": "c"}', 'exactly one of "prompt", "messages" or "document"'),
    ('{"id": "a", "category": "c", "prompt": "hi", "messages": []}', "got prompt and messages"),
    ('{"id": "a", "category": "c", "prompt": "  "}', '"prompt" must be a non-empty text'),
    ('{"id": 7, "category": "c", "prompt": "hi"}', '"id" must be a non-empty text'),
    ('{"id": "a", "category": "c", "messages": [{"role": "robot", "content": "hi"}]}', "Message 0 must be"),
    ('{"id": "a", "category": "c", "prompt": "hi", "max_new_tokens": 0}', '"max_new_tokens" must be a whole number'),
    ('{"id": "a", "category": "c", "prompt": "hi", "question": "why?"}', "belongs to a long-context item"),
    ('{"id": "a", "category": "c", "document": "nowhere.md", "question": "why?"}', "does not exist"),
    ('{"id": "ok", "category": "d", "prompt": "ho"}', "the id 'ok' is already used on line 1"),
])
def test_a_malformed_suite_line_is_named(tmp_path, line, expected):
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"id": "ok", "category": "c", "prompt": "fine"}\n\n' + line + "\n")
    with pytest.raises(SpecvizError) as error:
        load_suite(suite)
    message = str(error.value)
    assert expected in message and f"{suite}:3" in message, message


def test_an_empty_suite_is_refused(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n")
    with pytest.raises(SpecvizError, match="holds no prompts"):
        load_suite(suite)


# ---- the page's sweep: lab.sweep.Sweep and its panel ------------------------------------------------------
def test_the_page_sweep_checks_before_any_model_runs():
    suite = tuple(load_suite(ROOT / "assets/suite.jsonl"))
    request = VisitorRequest.from_inputs(PAGE, 8, Policy.private())
    sweep = Sweep(Policy.private(), suite)
    assert sweep.categories == sorted({item.category for item in suite})
    planned = sweep.plan(request, "suite category", "arithmetic", ("budget=4,8", ""), 16)
    assert {item.category for item in planned.prompts} == {"arithmetic"} and planned.max_new_tokens == 16
    assert all(item.max_new_tokens is None for item in planned.prompts) and planned.axes == (("budget", ("4", "8")),)
    (page,) = sweep.plan(request, "page prompt", "", ("budget=4", None), 8).prompts
    assert page.id == "page prompt" and page.text == PAGE["prompt"]
    for scope, category, axes, tokens, expected in [
            ("everything", "", ("budget=4", ""), 8, "scope must be 'page prompt' or 'suite category'"),
            ("suite category", "nope", ("budget=4", ""), 8, "No suite prompts in category `'nope'`"),
            ("suite category", ["code"], ("budget=4", ""), 8, "No suite prompts in category"),
            ("page prompt", "", (["budget=4"], ""), 8, "axis 1 must be text"),
            ("page prompt", "", ("budget=4", "x" * 600), 8, "axis 2 is 600 characters long"),
            ("page prompt", "", ("budget=4", ""), "inf", "new tokens per run must be"),
            ("page prompt", "", ("tau=1", ""), 8, "no parameter 'tau'")]:
        with pytest.raises(SpecvizError, match=expected):
            sweep.plan(request, scope, category, axes, tokens)
    public = Sweep(Policy.for_public(), suite)
    # 12 points on one prompt: 1 + 12 warm-ups, ar and 12 points = 26 runs, over the public 24
    with pytest.raises(SpecvizError, match="at most 24 runs.*asks for 26"):
        public.plan(VisitorRequest.from_inputs(PAGE, 8, Policy.for_public()), "page prompt", "",
                    ("budget=" + ",".join(map(str, range(1, 13))), ""), 8)
    with pytest.raises(SpecvizError, match="No sweep yet"):
        sweep.figure()


def _tab(policy: Policy, suite):
    import gradio as gr

    from specviz.panels.sweep_tab import SweepTab

    context = SimpleNamespace(policy=policy, tuning_suite=suite, model_events={"concurrency_id": "model"})
    with gr.Blocks():
        tokens = gr.Number(8)
        with gr.Tabs():
            return SweepTab(context, {}, tokens)


def test_the_sweep_tab_answers_with_the_report_or_a_sentence(lm, tmp_path):
    import gradio as gr

    suite = load_suite(ROOT / "assets/suite.jsonl")
    tab = _tab(Policy.private(), suite)
    answer = tab.on_sweep(None, "budget=4,8", "", "page prompt", "", 8, "mat", 8, quiet, **PAGE)
    sweep, plot, message = answer[tab.sweep], answer[tab.plot], answer[tab.message]
    csv_path, table = answer[tab.csv_file], answer[tab.table]
    assert isinstance(sweep, Sweep) and message == "Sweep done: 2 points x 1 prompts."
    report = sweep.report
    assert plot.data[0].type == "scatter" and list(plot.data[0].y) == [p.mat for p in report.points]
    assert list(csv.DictReader(io.StringIO(Path(csv_path).read_text())))[1]["budget"] == "8"
    assert "racer over budget" in table
    assert tab.on_metric(sweep, "speedup").data[0].y[0] == report.points[0].speedup
    for bad in (None, Sweep()):
        assert tab.on_metric(bad, "speedup") == gr.update()
    assert tab.on_metric(sweep, ["mat"]) == gr.update()
    for args, settings, expected in [
            (("budget=4", "", "page prompt", "", "inf", "speedup", 8), PAGE, "new tokens per run must be"),
            (("budget=4", "", {"a": 1}, "", 8, "speedup", 8), PAGE, "scope must be"),
            (("budget=4", "", "page prompt", "", 8, "speedup", 8), {**PAGE, "temperature": "nan"}, "temperature"),
            (("budget=4", "", "page prompt", "", 8, "speedup", 8), {**PAGE, "prompt": " "}, "prompt is empty")]:
        answer = tab.on_sweep(None, *args, quiet, **settings)
        message = answer[tab.message]
        assert answer[tab.sweep] is None and tab.plot not in answer  # the plot stays
        assert message.startswith("⚠️") and expected in message, message
    public = _tab(Policy.for_public(), suite)
    message = public.on_sweep(None, "budget=1,2,3,4,5,6,7,8", "max_breadth=1,2,4,8", "page prompt", "", 8,
                              "speedup", 8, quiet, **PAGE)[public.message]
    assert "at most 24 runs" in message


def test_cli_round_trip_with_csv(tmp_path, capsys):
    from specviz.cli import main  # in this process (test_cli.py runs a sweep through a real one)

    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(json.dumps(x) for x in [
        {"id": "skip", "category": "other", "prompt": "Name a colour."},
        {"id": "copy", "category": "copy", "prompt": "Repeat: sun moon star, sun moon star."}]))
    out_csv, out_json = tmp_path / "grid.csv", tmp_path / "grid.json"
    assert main(["sweep", "--method", "racer", "--suite", str(suite), "--category", "copy", "--vary", "budget=4,8",
                 "--vary", "max_breadth=2,4", "--max-new-tokens", "8", "--csv", str(out_csv), "--json", str(out_json)]) == 0
    out = capsys.readouterr()
    assert "[5/5]" in out.err and "max_breadth" in out.out
    lines = list(csv.reader(io.StringIO(out_csv.read_text())))
    assert lines[0][:3] == ["budget", "max_breadth", "mat"] and len(lines) == 5
    report = json.loads(out_json.read_text())
    assert {r["id"] for r in report["rows"]} == {"copy"}
    assert all(p["differing_fraction"] == 0.0 for p in report["points"])


def test_cli_refusals_name_the_problem(tmp_path, capsys):
    from specviz.cli import main

    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "a", "category": "copy", "prompt": "x"}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "category": "copy", "text": "x"}))
    for args, expected in [
            (("--suite", str(suite), "--category", "nope", "--vary", "budget=4"), "no category 'nope'; it has: copy"),
            (("--suite", str(bad), "--vary", "budget=4"), f"{bad}:1: unknown key(s) 'text'"),
            (("--prompt", "x", "--category", "copy", "--vary", "budget=4"), "--category filters a --suite"),
            (("--prompt", "x", "--vary", "budget=4", "--vary", "budget=8"), "varied twice"),
            (("--prompt", "x", "--method", "rapid", "--vary", "eta=0,1"), "eta=1 is refused"),
            (("--prompt", "x", "--vary", "budget=" + ",".join(map(str, range(1, 101))), "--vary",
              "seed=" + ",".join(map(str, range(100)))), "at most 64 grid points")]:
        status = main(["sweep", *args])  # in this process: main() is what `python -m specviz` runs
        err = capsys.readouterr().err
        assert status == 2 and expected in err and "Traceback" not in err, (args, err)
