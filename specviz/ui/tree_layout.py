"""Where each node of a shown tree goes: layered by depth (left to right), siblings by chance (the likeliest
on top), leaves on rows spread over the height available, every label beside its marker.

No two labels overlap, by construction: a depth's labels all start at the same x and its column is as wide
as its widest label, so labels of different depths are apart; within a depth two nodes lie in disjoint row
ranges of a tidy layout (a parent sits between its first and last child), so their centres are at least one
row pitch apart, and the pitch is taller than a label. Labels are measured in a monospace font (every
character the same advance), so the widths computed here are the widths drawn."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from specviz.ui.tree_view import BONUS, ShownNode

FONT_PX = 15            # token labels: at least 14 px on a 1280x720 screen
RADIUS = 9              # marker radius
LABEL_GAP = 5           # marker edge to label
MIN_COLUMN_GAP = 26     # a depth's widest label to the next depth's markers
MAX_COLUMN_GAP = 150    # a small tree spreads its depths at most this far apart
MIN_PITCH = 1.5 * FONT_PX   # row pitch: a label is 1.2 font sizes tall, so two rows never touch
MAX_PITCH = 64          # a small tree spreads its rows at most this far apart
PAD = 14                # canvas margin
MONO_ADVANCE = 0.62     # a monospace character's advance in font sizes (DejaVu Sans Mono 0.60, rounded up)
# what the tree box shows without scrolling at 1280x720 (the page's CSS gives the box this room)
CANVAS = (860.0, 430.0)


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
    """Positions of the markers and boxes of the labels, spread over the canvas (it grows when the tree
    needs more room than the canvas gives: the box then scrolls)."""
    if not nodes:
        return TreeGeometry({}, {}, {}, canvas[0], canvas[1], font_px)
    children = sibling_order(nodes)
    rows = _rows(children)
    depth = {n.id: n.depth for n in nodes}
    widths = {n.id: text_width(n.label, font_px) for n in nodes}
    depths = sorted(set(depth.values()))
    widest = {d: max(widths[i] for i in depth if depth[i] == d) for d in depths}

    # columns: a marker, its gap, the widest label of the depth, then the gap to the next depth's markers
    left = PAD + RADIUS * 1.4   # the widest marker (a star) must not touch the edge
    natural = left + sum(RADIUS + LABEL_GAP + widest[d] for d in depths) + MIN_COLUMN_GAP * (len(depths) - 1) + PAD
    gap = MIN_COLUMN_GAP
    if natural < canvas[0] and len(depths) > 1:  # spread the depths over the width
        gap = min(MAX_COLUMN_GAP, MIN_COLUMN_GAP + (canvas[0] - natural) / (len(depths) - 1))
    column_x, column_end, x = {}, {}, left
    for d in depths:
        column_x[d] = x
        column_end[d] = x + RADIUS + LABEL_GAP + widest[d]
        x = column_end[d] + gap + RADIUS
    width = max(canvas[0], column_end[depths[-1]] + PAD)

    # rows: the leaves' rows spread over the height, capped so that a small tree does not float apart
    n_rows = max(rows.values()) + 1
    pitch = min(MAX_PITCH, max(MIN_PITCH * font_px / FONT_PX, (canvas[1] - 2 * PAD) / n_rows))
    height = max(canvas[1], n_rows * pitch + 2 * PAD)
    top = (height - n_rows * pitch) / 2 + pitch / 2

    centres, labels = {}, {}
    half = 0.6 * font_px
    for n in nodes:
        cx, cy = column_x[n.depth], top + rows[n.id] * pitch
        centres[n.id] = (cx, cy)
        x0 = cx + RADIUS + LABEL_GAP
        labels[n.id] = Box(x0, cy - half, x0 + widths[n.id], cy + half)
    return TreeGeometry(centres, labels, column_end, width, height, font_px)


def _rows(children: dict[int, list[int]]) -> dict[int, float]:
    """Tidy rows: leaves on consecutive rows in depth-first order (likeliest sibling first), a parent midway
    between its first and last child. Iterative, so that a 256-deep chain is no recursion problem."""
    rows: dict[int, float] = {}
    next_row = 0
    stack = [(0, False)]
    while stack:
        node, expanded = stack.pop()
        kids = children.get(node, [])
        if not kids:
            rows[node] = float(next_row)
            next_row += 1
        elif expanded:
            rows[node] = (rows[kids[0]] + rows[kids[-1]]) / 2
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(kids))
    return rows
