"""The house's import contract, read from the source with an AST walk (function-level imports included):
no import cycle between modules or between packages anywhere in specviz/, and the layers import downward
only (the runtime knows nothing of trees, records, acceptance, drafters, methods, the engine, its studies or the
UI)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

from specviz.benches.app_structure import import_graph, imported_modules, module_name, package_of

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specviz"

# bottom to top: a package may import only itself and packages before it in this list
LAYERS = ["errors", "params", "runtime", "tree", "engine_configs", "records", "accept", "index", "drafters", "methods",
          "engine", "studies", "training", "render", "lab", "panels", "benches", "deploy", "commands", "cli"]


def test_the_walk_sees_imports_inside_functions():
    graph = import_graph()
    # specviz.runtime.shared_resources loads models inside its functions only
    assert graph.has_edge("specviz.runtime.shared_resources", "specviz.runtime.loading")
    assert graph.number_of_edges() > 150


def test_the_walk_finds_a_cycle_closed_by_a_function_level_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    assert [sorted(c) for c in nx.simple_cycles(import_graph(package))] == [["pkg.a", "pkg.sub.b"]]


def test_no_module_imports_itself_through_others():
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == [], "module import cycles: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:10])


def test_no_cycle_between_packages():
    graph = import_graph()
    packages = nx.DiGraph()
    for a, b in graph.edges:
        if package_of(a) != package_of(b):
            packages.add_edge(package_of(a), package_of(b))
    cycles = list(nx.simple_cycles(packages))
    assert cycles == [], f"package import cycles: {cycles}"


def test_every_package_imports_only_the_layers_below_it():
    graph = import_graph()
    upward = []
    for a, b in graph.edges:
        pa, pb = package_of(a), package_of(b)
        if pa == pb or pa in ("__main__", "specviz") or pb == "specviz":
            continue
        assert pa in LAYERS and pb in LAYERS, f"{a} -> {b}: a package outside the layer list"
        if LAYERS.index(pb) > LAYERS.index(pa):
            upward.append(f"{a} -> {b}")
    assert upward == [], "imports that run up the layers: " + "; ".join(upward)


def test_the_app_only_composes_panels_and_nothing_imports_it():
    """app.py sits on top of the house: it imports the panels' page and what launching needs, never the other
    way round (no module of specviz/ or tests/ imports `app`), and the page's modules live in specviz/panels."""
    app = ROOT / "app.py"
    known = {module_name(f, ROOT) for f in PACKAGE.rglob("*.py")}
    imported = imported_modules(app, known, ROOT)
    named = {node.module for node in ast.walk(ast.parse(app.read_text())) if isinstance(node, ast.ImportFrom)
             and (node.module or "").startswith("specviz.")}
    assert not named - known - {m.rsplit(".", 1)[0] for m in known}, f"app.py imports what is not there: {named}"
    assert "specviz.panels.page" in imported
    assert {package_of(m) for m in imported} <= {"panels", "lab", "methods", "runtime"}, sorted(imported)
    importers = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if "app" in names:
                importers.append(str(path.relative_to(ROOT)))
        # a script a test runs in another process counts too
        if path.name != "test_layout.py" and re.search(r"\bimport app\b|\bfrom app import\b", path.read_text()):
            importers.append(f"{path.relative_to(ROOT)} (in a script)")
    assert importers == [], f"modules that import app.py: {importers}"
