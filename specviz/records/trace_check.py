"""A trace from a file is checked before anything draws it: a visitor of a public Space may upload any JSON.

Two passes. On the raw JSON (before any record is built): nesting depth, the number of steps and of nodes in a
step. On the typed records: every field of every record has its declared type (ints are ints, floats finite or null,
texts of bounded length, statuses known), and every step's tree is a tree: node i has id i, node 0 is the one
root (parent -1, depth 0), every other node's parent is an earlier node and its depth one more than its
parent's, and the same holds for the cut nodes that follow the verified ones. A trace that fails is refused
with a message that says where and what; one that passes lays out in time linear in its size."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from enum import Enum
from functools import cache

from specviz.errors import SpecvizError

MAX_DEPTH = 24                # nesting of JSON objects and lists (a real trace nests about 8 deep)
MAX_STEPS = 5_000             # a 512-token run has at most 512 steps
MAX_NODES = 1_024             # per step, verified and cut together (the largest budget is 256)
MAX_TEXT = 10_000             # characters of one text field (a token's text is a few)
MAX_PROMPT_TEXT = 500_000     # characters of the decoded prompt
MAX_INT = 2 ** 53             # ids, token ids, counts: anything larger is not from a run


def check_raw(data) -> None:
    """Limits on the JSON as read, before records are built from it: nesting, finite numbers, steps, nodes."""
    _check_depth(data)
    steps = data.get("steps") if isinstance(data, dict) else None
    if isinstance(steps, list):
        if len(steps) > MAX_STEPS:
            raise SpecvizError(f"This trace has {len(steps):,} steps; a trace may have at most {MAX_STEPS:,}.")
        for i, step in enumerate(steps):
            nodes = step.get("nodes") if isinstance(step, dict) else None
            if isinstance(nodes, list) and len(nodes) > MAX_NODES:
                raise SpecvizError(f"Step {i} of this trace has {len(nodes):,} nodes; a step may have at most "
                                   f"{MAX_NODES:,}.")


def _check_depth(data) -> None:
    """Nesting and numbers, iteratively (a recursive walk is what a hostile nesting would break): a trace writes
    a float that is not finite as null, so NaN, Infinity or 1e400 in the file is not from specviz."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SpecvizError(f"This trace nests deeper than {MAX_DEPTH} levels: it is not a specviz trace.")
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecvizError("This trace holds a number that is not finite (NaN or Infinity): a specviz trace "
                               "writes those as null.")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def check_trace(trace) -> None:
    """Every field's type, every step's tree (see the module's note); SpecvizError naming the first fault."""
    _check_record(trace, "the trace")
    for text in trace.token_texts.values():
        if len(text) > MAX_TEXT:
            raise SpecvizError(f"A token text of this trace is longer than {MAX_TEXT:,} characters.")
    for i, step in enumerate(trace.steps):
        _check_tree(step, f"step {i}")


def _check_tree(step, where: str) -> None:
    nodes = step.nodes
    if not nodes:
        raise SpecvizError(f"This trace is damaged: {where} has no nodes (a step has at least its root).")
    depths = []
    for i, node in enumerate(nodes):
        if node.id != i:
            raise SpecvizError(f"This trace is damaged: node {i} of {where} has id {node.id} (ids count from 0).")
        if i == 0:
            if node.parent != -1 or node.depth != 0:
                raise SpecvizError(f"This trace is damaged: the root of {where} must have parent -1 and depth 0.")
        elif not 0 <= node.parent < i:
            raise SpecvizError(f"This trace is damaged: node {i} of {where} has parent {node.parent}; a node's "
                               "parent is an earlier node of its step.")
        elif node.depth != depths[node.parent] + 1:
            raise SpecvizError(f"This trace is damaged: node {i} of {where} has depth {node.depth}, one more than "
                               f"its parent's ({depths[node.parent]}) was expected.")
        if len(node.text) > MAX_TEXT:
            raise SpecvizError(f"Node {i} of {where} has a text longer than {MAX_TEXT:,} characters.")
        depths.append(node.depth)
    cut = step.cut_nodes
    if cut is None:
        return
    columns = (cut.parents, cut.tokens, cut.sources, cut.chances, cut.ranks)
    if len({len(c) for c in columns}) != 1:
        raise SpecvizError(f"This trace is damaged: the cut nodes of {where} have columns of different lengths.")
    if len(nodes) + len(cut) > MAX_NODES:
        raise SpecvizError(f"{where.capitalize()} of this trace offers {len(nodes) + len(cut):,} nodes; at most "
                           f"{MAX_NODES:,} are read.")
    for i, parent in enumerate(cut.parents):
        if not 0 <= parent < len(nodes) + i:
            raise SpecvizError(f"This trace is damaged: cut node {i} of {where} has parent {parent}; a node's "
                               "parent is an earlier node of its step.")


# ---- types ---------------------------------------------------------------------------------------------------
@cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _check_record(record, where: str) -> None:
    """Each dataclass field of record against its annotation (recursively into records it holds)."""
    hints = _hints(type(record))
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if not _fits(value, hints[f.name], f"{where}, field '{f.name}'"):
            raise SpecvizError(f"This trace is damaged: {where}, field '{f.name}' is not of its type "
                               f"({_type_name(hints[f.name])}).")


def _fits(value, hint, where: str) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is object:
        return True
    if origin is typing.Union or origin is types.UnionType:
        return any(_fits(value, a, where) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT
    if hint is float:
        # None and inf too: a trace stores a float that was not finite as null (records.step.json_ready), and a
        # record may read a null back as inf (a key-less trigger's h_min); the raw check refused NaN and inf in
        # the file
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                 and not math.isnan(value))
    if hint is str:  # the decoded prompt's bound here; a node's or a token's text is held to MAX_TEXT below
        return isinstance(value, str) and len(value) <= MAX_PROMPT_TEXT
    if isinstance(hint, type) and issubclass(hint, Enum):
        return isinstance(value, hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            return False
        _check_record(value, where)
        return True
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        item = args[0] if args else typing.Any
        return all(_fits(v, item, where) for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return False
        key, item = args if args else (str, typing.Any)
        return all(_fits(k, key, where) and _fits(v, item, where) for k, v in value.items())
    if hint in (list, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
