"""A trace from a file is checked before anything draws it: a visitor of a public Space may upload any JSON.

Two passes: on the raw JSON (nesting depth, steps, nodes a step), then on the typed records (every field of its
declared type, every step's verified and cut nodes a tree). Totals are capped as well as items, so what the page draws
of a trace that passes is bounded by construction and lays out in time linear in its size. A trace that fails is
refused with a message that says where and what.

Design notes: docs/design.md, "specviz/records/trace_check.py"."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from enum import Enum
from functools import cache

from specviz.errors import SpecvizError
from specviz.tree.sources import is_source

MAX_DEPTH = 24                # nesting of JSON objects and lists (a real trace nests about 8 deep)
MAX_STEPS = 5_000             # a 512-token run has at most 512 steps
MAX_NODES = 1_024             # per step, verified and cut together (the largest budget is 256)
MAX_PROMPT_TEXT = 500_000     # characters of the decoded prompt
MAX_INT = 2 ** 53             # ids, token ids, counts: anything larger is not from a run
MAX_TOKEN_TEXT = 256          # characters of a token's text or a node's (real vocabularies' longest are far shorter)
MAX_TRACE_TOKENS = 65_536     # tokens all steps of a trace commit together
MAX_TOKEN_TEXTS = 262_144     # entries of token_texts (a vocabulary's size)
MAX_LIST = 1 << 20            # items of any list (prompt ids, a chart's values)
MAX_CURVE_POINTS = 256        # cost_curve's measured sizes (the app measures about a dozen)
MAX_CURVE_MS = 1e7            # milliseconds of one verify in cost_curve
MAX_FREE_ENTRIES = 64         # entries of a free-form object (params, a node's meta) at each of its levels
MAX_FREE_KEY = 64             # characters of a free-form object's key
MAX_FREE_DEPTH = 2            # levels of a free-form object (a node's meta: source -> what it said)


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
    if len(trace.token_texts) > MAX_TOKEN_TEXTS:
        raise SpecvizError(f"This trace names {len(trace.token_texts):,} token texts; at most {MAX_TOKEN_TEXTS:,} "
                           "are read.")
    for key, text in trace.token_texts.items():
        if not key.isascii() or not key.isdigit() or len(text) > MAX_TOKEN_TEXT:
            raise SpecvizError(f"This trace is damaged: token_texts maps token ids (digits) to texts of at most "
                               f"{MAX_TOKEN_TEXT} characters.")
    _check_cost_curve(trace.cost_curve)
    committed = 0
    for i, step in enumerate(trace.steps):
        _check_tree(step, f"step {i}")
        committed += len(step.accepted_tokens)
        if committed > MAX_TRACE_TOKENS:
            raise SpecvizError(f"This trace commits more than {MAX_TRACE_TOKENS:,} tokens; a trace may commit at "
                               f"most {MAX_TRACE_TOKENS:,}.")
    if len(trace.output_ids) > MAX_TRACE_TOKENS:
        raise SpecvizError(f"This trace has {len(trace.output_ids):,} output tokens; at most "
                           f"{MAX_TRACE_TOKENS:,} are read.")


def _check_cost_curve(curve) -> None:
    """None, or {"sizes": [...], "ms": [...]}: sizes a tree can have (whole, increasing, 1 to MAX_NODES), each
    with a finite verify time."""
    if curve is None:
        return
    wanted = (f"cost_curve is {{\"sizes\": [...], \"ms\": [...]}} with at most {MAX_CURVE_POINTS} increasing "
              f"tree sizes from 1 to {MAX_NODES:,}, each with a finite time in ms")
    sizes, ms = curve.get("sizes"), curve.get("ms")
    if set(curve) != {"sizes", "ms"} or not isinstance(sizes, list) or not isinstance(ms, list) \
            or not 1 <= len(sizes) <= MAX_CURVE_POINTS or len(sizes) != len(ms):
        raise SpecvizError(f"This trace is damaged: {wanted}.")
    if not all(type(n) is int and 1 <= n <= MAX_NODES for n in sizes) or sizes != sorted(set(sizes)):
        raise SpecvizError(f"This trace is damaged: {wanted}.")
    if not all(type(t) in (int, float) and math.isfinite(t) and 0 <= t <= MAX_CURVE_MS for t in ms):
        raise SpecvizError(f"This trace is damaged: {wanted}.")


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
        if len(node.text) > MAX_TOKEN_TEXT:
            raise SpecvizError(f"Node {i} of {where} has a text longer than {MAX_TOKEN_TEXT} characters.")
        _check_sources(node.sources, f"node {i} of {where}")
        depths.append(node.depth)
    _check_commits(step, max(depths), where)
    for name, count in step.allocation.items():
        if not is_source(name) or not 0 <= count <= MAX_NODES:
            raise SpecvizError(f"This trace is damaged: the allocation of {where} names {_short(name)} with "
                               f"{count}; it maps source names to node counts up to {MAX_NODES:,}.")
    timings = step.timings_ms
    for f in dataclasses.fields(timings):
        value = getattr(timings, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SpecvizError(f"This trace is damaged: the {f.name} time of {where} is {_short(value)}; a time is "
                               "a finite number of milliseconds.")
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
        if len(cut.sources[i]) > MAX_TOKEN_TEXT:
            raise SpecvizError(f"This trace is damaged: cut node {i} of {where} names too many sources.")
        _check_sources(cut.source_list(i), f"cut node {i} of {where}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_sources(names, where: str) -> None:
    """A node's sources: registered names (tree.sources), each once, so a node names at most every source."""
    if len(set(names)) != len(names) or not all(is_source(name) for name in names):
        raise SpecvizError(f"This trace is damaged: {where} names sources that no drafter has (or one twice); "
                           "each source is a registered name, named once.")


def _check_commits(step, deepest: int, where: str) -> None:
    """A step commits its accepted path and the bonus token: at most its tree's depth plus one, each with an
    origin."""
    committed = len(step.accepted_tokens)
    if committed > deepest + 1:
        raise SpecvizError(f"This trace is damaged: {where} commits {committed:,} tokens with a tree {deepest} deep; "
                           "a step commits at most its tree's depth plus the bonus token.")
    if len(step.accepted_origins) != committed:
        raise SpecvizError(f"This trace is damaged: {where} has {len(step.accepted_origins):,} origins for "
                           f"{committed:,} committed tokens.")
    if any(len(str(origin)) > MAX_TOKEN_TEXT for origin in step.accepted_origins):
        raise SpecvizError(f"This trace is damaged: an origin of {where} is longer than {MAX_TOKEN_TEXT} characters.")


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
    if hint is str:  # the decoded prompt's bound here; a node's or a token's text is held to MAX_TOKEN_TEXT below
        return isinstance(value, str) and len(value) <= MAX_PROMPT_TEXT
    if isinstance(hint, type) and issubclass(hint, Enum):
        return isinstance(value, hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            return False
        _check_record(value, where)
        return True
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)) or len(value) > MAX_LIST:
            return False
        item = args[0] if args else typing.Any
        return all(_fits(v, item, where) for v in value)
    if hint is dict:
        return _free_form(value, 1)
    if origin is dict:
        if not isinstance(value, dict) or len(value) > MAX_TOKEN_TEXTS:
            return False
        key, item = args
        return all(_fits(k, key, where) and _fits(v, item, where) for k, v in value.items())
    if hint in (list, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, hint) if isinstance(hint, type) else True


def _free_form(value, level: int) -> bool:
    """A free-form object (params, a node's meta, before cost_curve's own check): MAX_FREE_DEPTH levels of objects
    or lists, at most MAX_FREE_ENTRIES entries each, short keys, scalars of bounded size at the leaves."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_INT
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= MAX_TOKEN_TEXT
    if level > MAX_FREE_DEPTH or not isinstance(value, (dict, list)):
        return False
    if isinstance(value, list):  # a cost curve's columns are the longest lists a free-form object holds
        return len(value) <= MAX_CURVE_POINTS and all(_free_form(v, level + 1) for v in value)
    return len(value) <= MAX_FREE_ENTRIES and all(
        isinstance(k, str) and len(k) <= MAX_FREE_KEY and _free_form(v, level + 1) for k, v in value.items())


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
