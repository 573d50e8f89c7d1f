"""One step's draft tree as a standalone SVG for slides: light theme, large type, the page's drawing
(tree_svg) still, with a title above and the legend below drawn into the SVG itself."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from specviz.records.step import StepRecord
from specviz.render.svg_text import attr, escape, num
from specviz.render.tree_layout import PAD, layout, text_width
from specviz.render.tree_svg import (BONUS_COLOUR, MONO, PATH_EDGE, ROOT_COLOUR, SHAPES, STATUS_NAMES, STATUS_ORDER,
                                 marker, source_colour, tree_svg_body)
from specviz.render.tree_view import BONUS, shown_tree
from specviz.records.status import NodeStatus

TOKEN_PX, TITLE_PX, LEGEND_PX = 18, 22, 16
TEXT = "#1a1a1a"
SANS = "'DejaVu Sans', 'Helvetica Neue', Arial, sans-serif"


def tree_svg(record: StepRecord | None, title: str | None = None, token_text: Callable[[int], str] | None = None,
             offered: bool = False) -> str:
    """The step's tree as SVG text (UTF-8, no XML declaration, so it can also be inlined in HTML).
    token_text: the text of a token id (the bonus and the cut nodes have no text in the record);
    offered: with the nodes the planner cut."""
    if record is None or len(record.nodes) <= 1 and not record.accepted_tokens:
        return _message_svg(title or "No step yet", "no draft tree: enter a prompt and press Step or Run")
    tree = shown_tree(record, token_text or (lambda token: f"<{token}>"), offered=offered)
    heading = title if title is not None else tree.title
    geometry = layout(tree.nodes, canvas=(0.0, 0.0), font_px=TOKEN_PX)
    top = PAD + TITLE_PX + 14
    legend, legend_height = _legend(tree, max(geometry.width, 560))
    width = max(geometry.width, text_width(heading, TITLE_PX) + 2 * PAD, 560)
    height = top + geometry.height + legend_height + PAD
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(height)}" '
           f'viewBox="0 0 {num(width)} {num(height)}" font-family="{attr(SANS)}">',
           f'<title>{escape(heading)}</title>',
           f'<rect class="background" width="{num(width)}" height="{num(height)}" fill="#ffffff"/>',
           f'<text class="title" x="{PAD}" y="{PAD + TITLE_PX}" font-size="{TITLE_PX}" font-weight="bold" '
           f'fill="{TEXT}">{escape(heading)}</text>',
           f'<g class="tree" transform="translate(0 {num(top)})" font-family="{attr(MONO)}">',
           *tree_svg_body(tree, geometry), '</g>',
           f'<g class="legend" transform="translate(0 {num(top + geometry.height)})">', *legend, '</g>', '</svg>']
    return "\n".join(out) + "\n"


def write_tree_svg(record: StepRecord | None, path: str | Path, title: str | None = None,
                   token_text: Callable[[int], str] | None = None, offered: bool = False) -> Path:
    """Write tree_svg(record) to path (parent folders created) as a standalone UTF-8 SVG file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + tree_svg(record, title, token_text, offered),
                    encoding="utf-8")
    return path


def _message_svg(title: str, message: str) -> str:
    width = max(text_width(title, TITLE_PX), text_width(message, TOKEN_PX)) + 2 * PAD
    height = 2 * PAD + TITLE_PX + 14 + TOKEN_PX
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(height)}" '
        f'viewBox="0 0 {num(width)} {num(height)}" font-family="{attr(SANS)}">',
        f'<title>{escape(title)}: {escape(message)}</title>',
        f'<rect class="background" width="{num(width)}" height="{num(height)}" fill="#ffffff"/>',
        f'<text class="title" x="{PAD}" y="{PAD + TITLE_PX}" font-size="{TITLE_PX}" font-weight="bold" '
        f'fill="{TEXT}">{escape(title)}</text>',
        f'<text class="empty" x="{PAD}" y="{PAD + TITLE_PX + 14 + TOKEN_PX}" font-size="{TOKEN_PX}" '
        f'fill="#6b6b6b">{escape(message)}</text>', '</svg>']) + "\n"


def _legend(tree, width: float) -> tuple[list[str], float]:
    """The sources present (their colours), then the statuses present (their shapes) and the accepted path,
    wrapped to the width; (svg lines, height)."""
    items = [(f'<circle cx="0" cy="0" r="8" fill="{source_colour(s)}"/>', s)
             for s in sorted({s for n in tree.nodes for s in n.sources})]
    present = {n.status for n in tree.nodes}
    for status in STATUS_ORDER:
        if status in present:
            colour = BONUS_COLOUR if status == BONUS else ROOT_COLOUR if status == NodeStatus.ROOT else "#555555"
            items.append((marker(SHAPES[status], 0, 0, colour, colour, 8), STATUS_NAMES[status]))
    items.append((f'<path d="M-12 0H12" stroke="{PATH_EDGE[0]}" stroke-width="{PATH_EDGE[1]}"/>', "accepted path"))
    out, x, y, line = [], PAD + 12.0, 24.0, 30.0
    for drawn, name in items:
        item_width = 12 + 8 + text_width(name, LEGEND_PX) + 22
        if x + item_width > width - PAD and x > PAD + 12:
            x, y = PAD + 12.0, y + line
        out.append(f'<g class="legend-item" transform="translate({num(x)} {num(y)})">{drawn}<text x="18" y="0" '
                   f'dy="0.35em" font-size="{LEGEND_PX}" fill="{TEXT}">{escape(name)}</text></g>')
        x += item_width
    return out, y + line / 2
