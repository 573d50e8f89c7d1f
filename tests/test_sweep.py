import csv
import io
import json
from pathlib import Path

import pytest

from specviz.accept.sampling import SamplingSettings
from specviz.engine.suite import load_suite
from specviz.errors import SpecvizError
from specviz.engine.sweep_grid import (
    MAX_SWEEP_POINTS,
    MAX_SWEEP_RUNS,
    format_grid,
    grid_csv,
    grid_figure,
    grid_points,
    grid_rows_csv,
    parse_axes,
    run_grid,
)

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def short_item():
    return [item for item in load_suite(ROOT / "assets/suite.jsonl") if item["id"] == "math-apples"]


@pytest.fixture(scope="module")
def grid(lm, short_item):
    calls = []
    report = run_grid(lm, short_item, "racer", parse_axes(["budget=4,8", "max_breadth=2,8"]), max_new_tokens=12,
                      progress=lambda done, total, label: calls.append((done, total, label)))
    return report, calls


def test_grid_2x2_is_lossless_at_temperature_0(grid):
    report, _ = grid
    assert report["axes"] == [{"name": "budget", "values": [4, 8]}, {"name": "max_breadth", "values": [2, 8]}]
    assert [(p["budget"], p["max_breadth"]) for p in report["points"]] == [(4, 2), (4, 8), (8, 2), (8, 8)]
    for point in report["points"]:
        assert point["differing_fraction"] == 0.0 and point["verdict"] == "yes", point
        assert point["mat"] >= 1.0 and point["tokens_per_s"] > 0 and point["speedup"] > 0 and point["runs"] == 1
    assert len(report["rows"]) == 4 and all(r["first_difference"] is None for r in report["rows"])
    assert report["fixed"]["temperature"] == 0.0 and "budget" not in report["fixed"]
    assert report["categories"]["ALL"]["ar"]["speedup"] == 1.0
    json.dumps(report)  # the report goes to JSON (CLI) and to gradio_client as is


def test_grid_csv_figure_and_table(grid):
    report, _ = grid
    lines = list(csv.reader(io.StringIO(grid_csv(report))))
    assert lines[0][:6] == ["budget", "max_breadth", "mat", "tokens_per_s", "speedup", "differing_fraction"]
    assert len(lines) == 5 and [line[:2] for line in lines[1:]] == [["4", "2"], ["4", "8"], ["8", "2"], ["8", "8"]]
    rows = list(csv.reader(io.StringIO(grid_rows_csv(report))))
    assert rows[0][:4] == ["id", "category", "budget", "max_breadth"] and len(rows) == 5
    figure = grid_figure(report)
    heat = figure.data[0]
    assert heat.type == "heatmap" and len(heat.z) == 2 and all(len(row) == 2 for row in heat.z)
    assert heat.z[1][0] == report["points"][2]["speedup"] and heat.text[1][0].endswith("x")
    assert "racer" in figure.layout.title.text and "speedup" in figure.layout.title.text
    assert grid_figure(report, "differing_fraction").data[0].text[0][0] == "0.0%"
    with pytest.raises(SpecvizError, match="Unknown sweep metric"):
        grid_figure(report, "nope")
    table = format_grid(report)
    assert "budget" in table and "max_breadth" in table and "differ" in table and len(table.splitlines()) == 7


def test_progress_called_once_per_run(grid):
    _, calls = grid
    total = 1 + 4  # greedy ar, then the four points
    assert [c[0] for c in calls] == list(range(1, total + 1)) and all(c[1] == total for c in calls)
    assert calls[0][2].endswith(": ar") and "budget=8, max_breadth=8" in calls[-1][2]


def test_sampled_axis_has_its_own_ar_baseline(lm, short_item):
    calls = []
    report = run_grid(lm, short_item, "racer", ["temperature=0,0.8"], max_new_tokens=8, budget=8,
                      sampling=SamplingSettings(seed=3), progress=lambda *a: calls.append(a))
    assert len(calls) == 4 == calls[-1][1]  # greedy ar, ar at 0.8, two points
    assert [b["label"] for b in report["baselines"]] == ["ar", "ar@T=0.8,top_p=1,seed=3"]
    greedy, sampled = report["points"]
    assert greedy["verdict"] == "yes" and greedy["differing_fraction"] == 0.0
    assert sampled["verdict"] == "sampled" and sampled["speedup"] > 0
    assert grid_figure(report, "mat").data[0].type == "scatter"


def test_refusals_before_anything_runs():
    with pytest.raises(SpecvizError) as error:  # parse_axes needs no model: nothing can have run
        parse_axes(["budget=" + ",".join(map(str, range(1, 101))), "seed=" + ",".join(map(str, range(100)))])
    assert str(MAX_SWEEP_POINTS) in str(error.value) and "10000" in str(error.value)
    with pytest.raises(SpecvizError, match="10000"):  # run_grid refuses it before touching the model
        run_grid(None, [{"id": "a", "category": "c", "prompt": "hi"}], "racer",
                 [("budget", list(range(1, 101))), ("seed", list(range(100)))])
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
    for args, expected in [
            (("--suite", str(suite), "--category", "nope", "--vary", "budget=4"), "no category 'nope'; it has: copy"),
            (("--prompt", "x", "--category", "copy", "--vary", "budget=4"), "--category filters a --suite"),
            (("--prompt", "x", "--vary", "budget=4", "--vary", "budget=8"), "varied twice"),
            (("--prompt", "x", "--method", "rapid", "--vary", "eta=0,1"), "eta=1 is refused"),
            (("--prompt", "x", "--vary", "budget=" + ",".join(map(str, range(1, 101))), "--vary",
              "seed=" + ",".join(map(str, range(100)))), "at most 64 grid points")]:
        status = main(["sweep", *args])  # in this process: main() is what `python -m specviz` runs
        err = capsys.readouterr().err
        assert status == 2 and expected in err and "Traceback" not in err, (args, err)
