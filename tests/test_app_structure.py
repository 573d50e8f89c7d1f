"""`dev structure`'s measurements (benches.app_structure): the import layers and circles it reads from a tree, and
the way one Step of the page takes between panels, lab, render and the packages below."""

from __future__ import annotations

from specviz.benches.app_structure import measure_structure, step_route


def _write(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_layers_and_imports_that_run_back_up(tmp_path):
    root = tmp_path / "specviz"
    _write(root, {"__init__.py": "", "errors.py": "",
                  "low/__init__.py": "", "low/a.py": "from specviz.errors import X\n",
                  "mid/__init__.py": "", "mid/b.py": "from specviz.low.a import f\n",
                  "top/__init__.py": "", "top/c.py": "import specviz.mid.b\ndef g():\n    from specviz.low import a\n"})
    straight = measure_structure(root)
    assert straight.layers == {"specviz": 0, "errors": 0, "low": 1, "mid": 2, "top": 3}
    assert straight.upward == [] and straight.modules["top"] == 2
    # a lazy import back up is still an import that runs back up: low -> top -> mid -> low is a circle
    _write(root, {"low/d.py": "def h():\n    from specviz.top.c import g\n"})
    circled = measure_structure(root)
    assert set(circled.upward) == {("low", "top"), ("mid", "low"), ("top", "low"), ("top", "mid")}
    assert "4 imports that run back up" in circled.lines()[-1]


def test_the_code_has_no_circle_and_the_app_layers_in_order():
    structure = measure_structure()
    assert structure.upward == []
    assert structure.layers["panels"] > structure.layers["lab"] > structure.layers["render"] > structure.layers["engine"]


def test_a_step_goes_down_once_and_the_view_comes_from_the_presenter(lm):
    """The page's Step (Stage.on_step, traced): it starts and ends in panels; the view is drawn by render called from
    panels, never from inside the Lab's model call; render never calls back up into lab or panels."""
    route = step_route(max_new_tokens=2)
    assert route.route[0] == ("panels",) and route.route[-1] == ("panels",)
    assert ("panels", "render") in route.route
    assert route.calls.get(("panels", "render")) == 1          # the presenter, once
    assert route.calls.get(("lab", "render"), 0) <= 1          # the live run's Recording, nothing drawn
    assert not any(caller == "render" and called in ("lab", "panels") for caller, called in route.calls)
    assert route.calls.get(("lab", "below"), 0) > 0            # the model call went down
