"""A static tree (tree.static_tree) in the form each serving engine takes it, and as a graph file.

- vLLM: `speculative_config` JSON: `method`, `num_speculative_tokens` (the tree's size) and
  `speculative_token_tree`, a Python literal of the paths as tuples in breadth-first order (the tree-attention
  backend reads it).
- SGLang: its EAGLE trees are dynamic (each step keeps the best draft tokens by the drafter's own scores), so
  the static tree becomes their envelope: `--speculative-num-steps` (depth), `--speculative-eagle-topk` (the
  most children of any node) and `--speculative-num-draft-tokens` (the tree's size plus the root: SGLang counts
  the verified root, e.g. 4 for a chain of 3 at top-k 1).
- TensorRT-LLM: `eagle_choices` (the paths as lists) with `max_total_draft_tokens`.
- Medusa: `medusa_choices` (the paths as lists: level d is Medusa's head d).
- JSON: the tree with every path's chance; GraphML (networkx): nodes with their path, chance and depth.
"""

from __future__ import annotations

import io
import json

import networkx as nx

from specviz.errors import SpecvizError
from specviz.tree.static_tree import StaticTree

FORMATS = ("vllm", "sglang", "trtllm", "medusa", "json", "graphml")


def export(tree: StaticTree, fmt: str, method: str = "eagle", extra: dict | None = None) -> str:
    """The text an engine takes for this tree. method: vLLM's speculative method ("eagle" for a head,
    "draft_model" for a draft model); extra: more fields for the JSON form (the measurement's figures)."""
    paths = [list(path) for path in tree.paths]
    if fmt == "vllm":
        literal = "[" + ", ".join("(" + ", ".join(map(str, p)) + ("," if len(p) == 1 else "") + ")" for p in paths) + "]"
        return json.dumps({"method": method, "num_speculative_tokens": tree.size, "speculative_token_tree": literal})
    if fmt == "sglang":
        return (f"--speculative-num-steps {tree.depth} --speculative-eagle-topk {tree.max_children()} "
                f"--speculative-num-draft-tokens {tree.size + 1}")
    if fmt == "trtllm":
        return json.dumps({"eagle_choices": paths, "max_total_draft_tokens": tree.size})
    if fmt == "medusa":
        return json.dumps({"medusa_choices": paths})
    if fmt == "json":
        return json.dumps({"paths": paths, "chances": [round(c, 5) for c in tree.chances],
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
