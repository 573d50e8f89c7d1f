"""A static tree (tree.static_tree) as data: JSON (every path with its chance) and GraphML (networkx).

What a serving engine is told is engine_configs' job (one module per engine, each under its own drafting rule): the
engines' formats are named here only so that a command or a tab offers them in one list.
"""

from __future__ import annotations

import io
import json

import networkx as nx

from specviz.errors import SpecvizError
from specviz.tree.static_tree import StaticTree

# a format name -> the serving engine it asks for (engine_configs.ENGINES); json and graphml are the tree itself
ENGINE_FORMATS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "medusa": "Medusa",
                  "llamacpp": "llama.cpp"}
FORMATS = (*ENGINE_FORMATS, "json", "graphml")


def export(tree: StaticTree, fmt: str, extra: dict | None = None) -> str:
    """The tree as JSON (extra: more fields, the measurement's figures) or GraphML."""
    if fmt == "json":
        return json.dumps({"paths": [list(path) for path in tree.paths], "chances": [round(c, 5) for c in tree.chances],
                           "expected_accepted": round(tree.expected_accepted, 4), **(extra or {})}, indent=1)
    if fmt == "graphml":
        return graphml(tree)
    raise SpecvizError(f"Unknown format {fmt!r}: choose one of {', '.join(FORMATS)}.")


def as_graph(tree: StaticTree) -> nx.DiGraph:
    """The tree as a networkx graph: node "root" and one node per path (named by its ranks, "0-1"), edges
    parent -> child, each node with its depth and chance (the root: 1)."""
    graph = nx.DiGraph()
    graph.add_node("root", depth=0, chance=1.0, path="")
    for path, chance in zip(tree.paths, tree.chances):
        name = "-".join(map(str, path))
        graph.add_node(name, depth=len(path), chance=float(chance), path=name)
        graph.add_edge("-".join(map(str, path[:-1])) or "root", name)
    return graph


def graphml(tree: StaticTree) -> str:
    buffer = io.BytesIO()
    nx.write_graphml(as_graph(tree), buffer)
    return buffer.getvalue().decode()
