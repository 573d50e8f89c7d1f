"""Where each node of a shown tree goes: layered by depth (left to right), siblings by chance (the likeliest
on top), leaves on rows spread over the height available, every label beside its marker. A tree deeper than
the box is wide wraps like lines of text: the depths that fit the width form a band, the next depths a band
below it, and an edge into the next band runs down the right margin and in from the left.

No two labels overlap, by construction: within a band a depth's labels all start at the same x and its
column is as wide as its widest label, so labels of different depths are apart; within a depth two nodes lie
in disjoint row ranges of a tidy layout (a parent sits between its first and last child), so their centres
are at least one row pitch apart (the packing keeps every depth column's rows apart), and the pitch is
taller than a label; bands take disjoint rows. Labels are
measured in a monospace font (every character the same advance), so the widths computed here are the
widths drawn."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from specviz.render.tree_view import BONUS, ShownNode

FONT_PX = 15            # token labels: at least 14 px on a 1280x720 screen
RADIUS = 9              # marker radius
LABEL_GAP = 5           # marker edge to label
MIN_COLUMN_GAP = 26     # a depth's widest label to the next depth's markers
MAX_COLUMN_GAP = 150    # a small tree spreads its depths at most this far apart
MIN_PITCH = 1.4 * FONT_PX   # row pitch: a label is 1.2 font sizes tall, so two rows never touch
MAX_PITCH = 64          # a small tree spreads its rows at most this far apart
BAND_GAP_ROWS = 0.8     # rows between two bands of a deep tree (the wrapped edges run through it)
PAD = 14                # canvas margin
MONO_ADVANCE = 0.62     # a monospace character's advance in font sizes (DejaVu Sans Mono 0.60, rounded up)
# what the tree box shows without scrolling at 1280x720 (the page's CSS gives the box this room)
CANVAS = (740.0, 420.0)


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: "Box") -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


@dataclass(frozen=True)
class TreeGeometry:
    centres: dict[int, tuple[float, float]]   # node id -> marker centre
    labels: dict[int, Box]                    # node id -> its label's box
    column_end: dict[int, float]              # depth -> x where that depth's label column ends
    width: float
    height: float
    font_px: float = FONT_PX
    radius: float = RADIUS
    band_of: dict[int, int] = field(default_factory=dict)    # depth -> its band (0: the root's)
    band_gap_y: dict[int, float] = field(default_factory=dict)  # band -> y of the gap below it (wrap edges)

    def wraps(self, parent_depth: int) -> bool:
        """Whether an edge from this depth goes down into the next band."""
        return self.band_of.get(parent_depth + 1, 0) != self.band_of.get(parent_depth, 0)


def text_width(text: str, font_px: float = FONT_PX) -> float:
    """Width of text in the monospace label font: wide (East Asian) characters take two advances."""
    total = 0.0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 * MONO_ADVANCE if unicodedata.east_asian_width(ch) in ("W", "F") else MONO_ADVANCE
    return total * font_px


def sibling_order(nodes: list[ShownNode]) -> dict[int, list[int]]:
    """Each node's children, likeliest first: the bonus (certain), then by the planner's chance (a node
    without one keeps the drafters' order, after those with one)."""
    children: dict[int, list[ShownNode]] = {n.id: [] for n in nodes}
    for n in nodes:
        if n.parent >= 0:
            children[n.parent].append(n)

    def key(n: ShownNode):
        return (n.status != BONUS, -(n.chance if n.chance is not None else -1.0), n.id)

    return {parent: [c.id for c in sorted(kids, key=key)] for parent, kids in children.items()}


def layout(nodes: list[ShownNode], canvas: tuple[float, float] = CANVAS, font_px: float = FONT_PX) -> TreeGeometry:
    """Positions of the markers and boxes of the labels, spread over the canvas (it grows taller when the tree
    needs more rows than the canvas holds: the box then scrolls). canvas (0, 0): as small as the tree allows,
    one band."""
    if not nodes:
        return TreeGeometry({}, {}, {}, canvas[0], canvas[1], font_px)
    children = sibling_order(nodes)
    depth = {n.id: n.depth for n in nodes}
    widths = {n.id: text_width(n.label, font_px) for n in nodes}
    depths = sorted(set(depth.values()))
    widest = {d: max(widths[i] for i in depth if depth[i] == d) for d in depths}

    # columns: a marker, its gap, the widest label of the depth, then the gap to the next depth's markers;
    # the depths that fit the width make a band, the rest wrap into the next
    left = PAD + RADIUS * 1.4   # the widest marker (a star) must not touch the edge
    extent = {d: RADIUS + LABEL_GAP + widest[d] for d in depths}
    bands: list[list[int]] = [[]]
    x = left
    for d in depths:
        if bands[-1] and canvas[0] > 0 and x + extent[d] + PAD > canvas[0]:
            bands.append([])
            x = left
        bands[-1].append(d)
        x += extent[d] + MIN_COLUMN_GAP + RADIUS
    gap = MIN_COLUMN_GAP
    if len(bands) == 1 and len(depths) > 1:  # one band narrower than the box: spread its depths over the width
        natural = left + sum(extent.values()) + (MIN_COLUMN_GAP + RADIUS) * (len(depths) - 1) + PAD
        gap = min(MAX_COLUMN_GAP, MIN_COLUMN_GAP + max(0.0, canvas[0] - natural) / (len(depths) - 1))
    column_x, column_end, band_of = {}, {}, {}
    for b, band in enumerate(bands):
        x = left
        for d in band:
            column_x[d], column_end[d], band_of[d] = x, x + extent[d], b
            x = column_end[d] + gap + RADIUS
    width = max(canvas[0], max(column_end.values()) + PAD)

    # rows: each band's own tidy rows, the bands one under the other with a gap row between, spread over the
    # height and capped so that a small tree does not float apart
    rows, band_rows = _band_rows(children, depth, band_of, len(bands))
    gaps = BAND_GAP_ROWS * (len(bands) - 1)
    n_rows = sum(band_rows) + gaps
    pitch = min(MAX_PITCH, max(MIN_PITCH * font_px / FONT_PX, (canvas[1] - 2 * PAD) / n_rows))
    height = max(canvas[1], n_rows * pitch + 2 * PAD)
    top = (height - n_rows * pitch) / 2 + pitch / 2
    band_top, offset = [], 0.0
    for count in band_rows:
        band_top.append(offset)
        offset += count + BAND_GAP_ROWS
    band_gap_y = {b: top + (band_top[b] + band_rows[b] - 0.5 + BAND_GAP_ROWS / 2) * pitch for b in range(len(bands) - 1)}

    centres, labels = {}, {}
    half = 0.6 * font_px
    for n in nodes:
        cx, cy = column_x[n.depth], top + (band_top[band_of[n.depth]] + rows[n.id]) * pitch
        centres[n.id] = (cx, cy)
        x0 = cx + RADIUS + LABEL_GAP
        labels[n.id] = Box(x0, cy - half, x0 + widths[n.id], cy + half)
    return TreeGeometry(centres, labels, column_end, width, height, font_px, RADIUS, band_of, band_gap_y)


def _band_rows(children: dict[int, list[int]], depth: dict[int, int], band_of: dict[int, int],
               n_bands: int) -> tuple[dict[int, float], list[int]]:
    """Each node's row within its band, and each band's row count. A band holds the subtrees that start at its
    first depth, in the order a depth-first walk of the whole tree meets them; within it, packed rows."""
    rows: dict[int, float] = {}
    band_rows = [0] * n_bands
    roots: list[list[int]] = [[] for _ in range(n_bands)]
    stack = [0]
    while stack:  # the bands' own roots, in depth-first order
        node = stack.pop()
        kids = children.get(node, [])
        if node == 0 or band_of[depth[node]] != band_of[depth[node] - 1]:
            roots[band_of[depth[node]]].append(node)
        stack.extend(reversed(kids))
    for b in range(n_bands):
        in_band = {node: [c for c in children.get(node, []) if band_of[depth[c]] == b]
                   for node in _walk(children, roots[b], depth, band_of, b)}
        band = _pack(in_band, depth, roots[b])
        low = min(band.values())
        rows.update({node: row - low for node, row in band.items()})
        band_rows[b] = round(max(band.values()) - low) + 1
    return rows, band_rows


def _walk(children, roots, depth, band_of, band) -> list[int]:
    """The nodes of one band below its roots."""
    found, stack = [], list(roots)
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(c for c in children.get(node, []) if band_of[depth[c]] == band)
    return found


def _pack(children: dict[int, list[int]], depth: dict[int, int], roots: list[int]) -> dict[int, float]:
    """Rows for a forest drawn one depth per column: subtrees one under the other in order (likeliest sibling
    first), each moved up as far as its outline allows: in every depth column the two subtrees share, its
    top node comes at least a row below the one above (Reingold and Tilford's contours, by depth). A parent
    sits midway between its first and last child. Only nodes of one depth share a column, so a shallow
    leaf leaves its row free to deeper nodes further on: the tree takes fewer rows than it has leaves.
    Iterative, so that a 256-deep chain is no recursion problem."""
    rows: dict[int, float] = {}
    members: dict[int, list[int]] = {}                      # subtree root -> its nodes
    outline: dict[int, dict[int, tuple[float, float]]] = {}  # subtree root -> depth -> (top row, bottom row)

    def stack_up(tops: list[int]) -> tuple[list[int], dict[int, tuple[float, float]]]:
        nodes, joined = [], {}
        for top in tops:
            shift = max((joined[d][1] + 1 - lo for d, (lo, _) in outline[top].items() if d in joined), default=0.0)
            for node in members[top]:
                rows[node] += shift
            for d, (lo, hi) in outline[top].items():
                lo, hi = lo + shift, hi + shift
                joined[d] = (min(joined[d][0], lo), max(joined[d][1], hi)) if d in joined else (lo, hi)
            nodes.extend(members.pop(top))
            del outline[top]
        return nodes, joined

    stack = [(root, False) for root in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        kids = children.get(node, [])
        if kids and not expanded:
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(kids))
            continue
        nodes, joined = stack_up(kids)
        rows[node] = (rows[kids[0]] + rows[kids[-1]]) / 2 if kids else 0.0
        joined[depth[node]] = (rows[node], rows[node])
        members[node], outline[node] = [node, *nodes], joined
    stack_up(list(roots))
    return rows
