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

ROOT = Path(__file__).resolve().parents[1]            # specviz/
APP_LAYER = ("panels", "lab", "render")               # a Step's hops are counted between these and "below"


def package_of(path: Path, root: Path = ROOT) -> str:
    """specviz/lab/lab.py -> "lab"; a top-level module (specviz/cli.py) is its own package."""
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else Path(parts[0]).stem


def _imported_packages(path: Path) -> set[str]:
    """The specviz packages a module imports, at any depth of its code (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if "." in node.module else [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "specviz" and len(parts) > 1:
                found.add(parts[1])
    return found


@dataclass(frozen=True)
class Structure:
    modules: dict[str, int]                   # package -> its modules
    layers: dict[str, int]                    # package -> its layer (0: imports no other package)
    upward: list[tuple[str, str]]             # (importer, imported) package pairs on an import circle

    def lines(self) -> list[str]:
        by_layer = sorted(self.modules, key=lambda p: (-self.layers[p], p))
        rows = [f"layer {self.layers[p]:2d}  {p:<10} {self.modules[p]:3d} modules" for p in by_layer]
        rows.append(f"{sum(self.modules.values())} modules in {len(self.modules)} packages, "
                    f"{max(self.layers.values()) + 1} layers, {len(self.upward)} imports that run back up"
                    + (f": {', '.join(f'{a} -> {b}' for a, b in self.upward)}" if self.upward else ""))
        return rows


def measure_structure(root: Path = ROOT) -> Structure:
    modules: dict[str, int] = defaultdict(int)
    imports: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        package = package_of(path, root)
        modules[package] += 1
        imports[package] |= _imported_packages(path) - {package}
    reach = {p: _reachable(p, imports) for p in modules}
    upward = sorted((a, b) for a in modules for b in imports[a] if a in reach.get(b, set()))
    layers: dict[str, int] = {}

    def layer(package: str, seen: frozenset = frozenset()) -> int:
        if package not in layers:
            below = [q for q in imports[package] if q in modules and q not in seen and package not in reach[q]]
            layers[package] = 1 + max((layer(q, seen | {package}) for q in below), default=-1)
        return layers[package]

    for package in modules:
        layer(package)
    return Structure(dict(modules), layers, upward)


def _reachable(start: str, imports: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for q in imports.get(todo.pop(), ()):
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return seen


def _layer_of(filename: str) -> str | None:
    """The app-layer package of a frame's file, "below" for the rest of specviz, None outside it."""
    try:
        package = package_of(Path(filename).resolve())
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
    """One Step of the page, from the stage's handler (Stage.on_step on a page built here, the default model, the
    first example prompt) until it answers: its package stack (panels, lab, render, or "below": the engine, the
    model and the rest of specviz as one) cut to its outer `depth` packages each time that changes, and the calls
    from one of these packages into another. A package that calls itself stays one entry of the stack. Traced on the
    compute thread, where the page's model calls run, so the call's own work is in it."""
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
        page.stage.on_step(None, None, max_new_tokens, **settings)   # the model loaded and warm first: not traced
        sys.setprofile(profile)
        try:
            page.stage.on_step(None, None, max_new_tokens, **settings)
        finally:
            sys.setprofile(None)

    try:
        COMPUTE.run(traced_step)
    finally:
        page.blocks.close()
    return StepRoute(route, dict(calls))
