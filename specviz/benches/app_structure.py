"""The code's structure, measured from the code itself: modules per package, the packages' import layers (the
longest chain of imports below each), imports that run back up (an import into a package that imports the importer,
directly or through others), and the packages one Step of the page passes on its way down and up, traced in this
process through the stage's own handler."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]            # specviz/
APP_LAYER = ("panels", "lab", "render")               # a Step's hops are counted between these and "below"


def module_name(path: Path, root: Path) -> str:
    """root/specviz/lab/lab.py -> "specviz.lab.lab" (a package's __init__.py is the package)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str], root: Path) -> set[str]:
    """The known modules a file imports anywhere in it, lazy imports and relative ones too (`from a import b`
    counts a.b when that is a module)."""
    found = set()
    current = module_name(path, root)
    package = current if path.name == "__init__.py" else current.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name in known and name != current}


def import_graph(package: Path = ROOT) -> nx.DiGraph:
    """Every module of the package (a folder) and the modules of it each one imports."""
    files = sorted(path for path in package.rglob("*.py") if "__pycache__" not in path.parts)
    known = {module_name(f, package.parent) for f in files}
    graph = nx.DiGraph()
    for f in files:
        source = module_name(f, package.parent)
        graph.add_node(source)
        for target in imported_modules(f, known, package.parent):
            graph.add_edge(source, target)
    return graph


def package_of(module: str) -> str:
    """"specviz.lab.lab" -> "lab"; a top-level module ("specviz.cli") is its own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@dataclass(frozen=True)
class Structure:
    modules: dict[str, int]                   # package -> its modules
    layers: dict[str, int]                    # package -> its layer (0: imports no other package)
    upward: list[tuple[str, str]]             # (importer, imported) package pairs on an import circle

    def lines(self) -> list[str]:
        by_layer = sorted(self.modules, key=lambda p: (-self.layers[p], p))
        width = max(map(len, self.modules), default=0)
        rows = [f"layer {self.layers[p]:2d}  {p:<{width}} {self.modules[p]:3d} modules" for p in by_layer]
        rows.append(f"{sum(self.modules.values())} modules in {len(self.modules)} packages, "
                    f"{max(self.layers.values()) + 1} layers, {len(self.upward)} imports that run back up"
                    + (f": {', '.join(f'{a} -> {b}' for a, b in self.upward)}" if self.upward else ""))
        return rows


def measure_structure(package: Path = ROOT) -> Structure:
    """Modules per package, each package's layer (the longest chain of package imports below it, a circle counted
    as one), and the package imports that lie on a circle."""
    graph = import_graph(package)
    modules: dict[str, int] = defaultdict(int)
    packages = nx.DiGraph()
    for module in graph.nodes:
        modules[package_of(module)] += 1
        packages.add_node(package_of(module))
    packages.add_edges_from((package_of(a), package_of(b)) for a, b in graph.edges if package_of(a) != package_of(b))
    circles = nx.condensation(packages)
    members = circles.graph["mapping"]        # package -> its circle (a node of the condensation)
    upward = sorted((a, b) for a, b in packages.edges if members[a] == members[b])
    depth: dict[int, int] = {}
    for circle in reversed(list(nx.topological_sort(circles))):
        depth[circle] = 1 + max((depth[below] for below in circles.successors(circle)), default=-1)
    return Structure(dict(modules), {p: depth[members[p]] for p in packages.nodes}, upward)


def _layer_of(filename: str) -> str | None:
    """The app-layer package of a frame's file, "below" for the rest of specviz, None outside it."""
    try:
        package = package_of(module_name(Path(filename).resolve(), ROOT.parent))
    except ValueError:
        return None
    return package if package in APP_LAYER else "below"


@dataclass(frozen=True)
class StepRoute:
    """How one Step of the page moves between packages."""
    route: list[tuple[str, ...]]       # the outer packages of the call stack, each time they change
    calls: dict[tuple[str, str], int]  # (caller package, called package) -> calls from one into the other

    def lines(self) -> list[str]:
        rows = [f"one Step, its outer two packages ({len(self.route) - 1} changes): "
                + " | ".join(" > ".join(stack) for stack in self.route)]
        rows += [f"  calls {a} -> {b}: {n}" for (a, b), n in sorted(self.calls.items())]
        return rows


def step_route(max_new_tokens: int = 4, method: str = "pld", depth: int = 2) -> StepRoute:
    """One Step of the page (a session's second: the first made its Lab), from the stage's handler (Stage.on_step
    on a page built here, the default model, the first example prompt) until it answers: its package stack
    (panels, lab, render, or "below": the engine, the model and the rest of specviz as one) cut to its outer
    `depth` packages each time that changes, and the calls from one of these packages into another. A package
    that calls itself stays one entry of the stack. Traced on the compute thread, where the page's model calls
    run, so the call's own work is in it."""
    from specviz.lab.public_policy import Policy
    from specviz.panels.page import build_page
    from specviz.panels.page_context import PageContext
    from specviz.runtime.compute_thread import COMPUTE

    context = PageContext.of(Policy.private())
    page = build_page(context)
    settings = {"model": "", "prompt": next(iter(context.examples.values())), "method": method, "budget": 8}
    stack: list[list] = []          # [package, frames of it in a row]
    route: list[tuple[str, ...]] = []
    calls: dict[tuple[str, str], int] = defaultdict(int)

    def profile(frame, event, arg):
        if event == "call":
            where = _layer_of(frame.f_code.co_filename)
            if where is None or (not stack and where != "panels"):
                return
            if stack and stack[-1][0] == where:
                stack[-1][1] += 1
            else:
                if stack:
                    calls[(stack[-1][0], where)] += 1
                stack.append([where, 1])
        elif event == "return" and stack and _layer_of(frame.f_code.co_filename) == stack[-1][0]:
            stack[-1][1] -= 1
            if not stack[-1][1]:
                stack.pop()
        else:
            return
        shown = tuple(package for package, _ in stack[:depth])
        if shown and (not route or route[-1] != shown):
            route.append(shown)

    def traced_step():
        # the session's first Step, not traced: it loads and warms the model and makes the visitor's Lab (the
        # first visit's, as a page's load event would)
        lab = page.stage.on_step(None, None, max_new_tokens, **settings)[page.out.lab]
        sys.setprofile(profile)
        try:
            page.stage.on_step(None, lab, max_new_tokens, **settings)
        finally:
            sys.setprofile(None)

    try:
        COMPUTE.run(traced_step)
    finally:
        page.blocks.close()
    return StepRoute(route, dict(calls))
