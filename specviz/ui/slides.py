"""One step's draft tree as a standalone SVG for slides: light theme, large type, no plotly (its image
export needs kaleido, which we do not ship). The visual language is tree_figure's: colour = source (a node
two sources proposed is filled in one colour and ringed in the other), marker = status, the accepted path
dark and thick; rejected and unreached subtrees stay visible but faded."""

from __future__ import annotations

import html
import math
import unicodedata
from pathlib import Path

from specviz.records.status import ACCEPTED_STATUSES, BENT_STATUSES, REFUSED_STATUSES, NodeStatus
from specviz.records.step import NodeRecord, StepRecord
from specviz.ui.viz import STATUS_COLOURS, STATUS_SYMBOLS, group_colours, source_group, tidy_layout, visible_token

RADIUS = 14                  # marker radius (px)
ROW = 48                     # height of one leaf row
PAD = 28                     # outer margin
LABEL_GAP = 8                # marker edge to token text
COLUMN_GAP = 44              # end of the longest label of a depth to the next depth's markers
MAX_TOKEN_CHARS = 20         # longer tokens are cut with an ellipsis
TOKEN_PX, TITLE_PX, LEGEND_PX, AXIS_PX = 18, 22, 16, 14
TEXT, MUTED = "#1a1a1a", "#6b6b6b"
ACCEPTED_EDGE, OTHER_EDGE = ("#2a2a2a", 5), ("#bcbcbc", 2)
FADED = 0.45                 # opacity of rejected / unreached subtrees (their edges are grey already)
SANS = "'DejaVu Sans', 'Helvetica Neue', Arial, sans-serif"
MONO = "'DejaVu Sans Mono', Menlo, Consolas, monospace"
STATUS_ORDER = (NodeStatus.ROOT, NodeStatus.ACCEPTED, NodeStatus.RELAXED, NodeStatus.TRANSFERRED,
                NodeStatus.REJECTED, NodeStatus.UNREACHED)
STATUS_LEGEND = {NodeStatus.ROOT: "committed root", NodeStatus.ACCEPTED: "accepted",
                 NodeStatus.RELAXED: "accepted (relaxed)", NodeStatus.TRANSFERRED: "accepted by p_hat",
                 NodeStatus.REJECTED: "rejected", NodeStatus.UNREACHED: "not reached"}


def tree_svg(record: StepRecord | None, title: str | None = None) -> str:
    """The step's draft tree as SVG text (UTF-8, no XML declaration, so it can also be inlined in HTML)."""
    if record is None or len(record.nodes) <= 1:
        return _empty_svg(record, title)
    nodes = {n.id: n for n in record.nodes}
    layout = tidy_layout(record)
    faded = _faded(record)
    labels = {n.id: _label(n.text) for n in record.nodes}

    depths = sorted({n.depth for n in record.nodes})
    column = {}
    x = PAD + RADIUS * 1.3  # the widest marker (star / diamond) must not touch the edge
    for d in depths:
        column[d] = x
        widest = max(_text_width(labels[n.id][1], TOKEN_PX, mono=True) for n in record.nodes if n.depth == d)
        x += RADIUS + LABEL_GAP + widest + COLUMN_GAP + RADIUS
    tree_width = x - COLUMN_GAP - RADIUS + PAD
    rows = int(round(max(-y for _, y in layout.values()))) + 1

    raw_heading = title if title is not None else _default_title(record)
    heading = _escape(raw_heading)
    top = PAD + TITLE_PX + 18 + AXIS_PX + 14  # title, then the depth axis labels
    position = {i: (column[nodes[i].depth], top + (-y) * ROW + ROW / 2) for i, (_, y) in layout.items()}
    width = max(tree_width, _text_width(raw_heading, TITLE_PX, bold=True) + 2 * PAD, 520)

    legend, legend_height = _legend(record, width, top + rows * ROW + 16)
    height = top + rows * ROW + 16 + legend_height + PAD

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" height="{_n(height)}" '
           f'viewBox="0 0 {_n(width)} {_n(height)}" font-family="{_attr(SANS)}">',
           f'<title>{heading}</title>',
           f'<rect class="background" x="0" y="0" width="{_n(width)}" height="{_n(height)}" fill="#ffffff"/>',
           f'<text class="title" x="{PAD}" y="{PAD + TITLE_PX}" font-size="{TITLE_PX}" font-weight="bold" '
           f'fill="{TEXT}">{heading}</text>']
    for d in depths:
        if d > 0:
            out.append(f'<text class="depth" x="{_n(column[d])}" y="{_n(top - 12)}" font-size="{AXIS_PX}" '
                       f'text-anchor="middle" fill="{MUTED}">depth {d}</text>')

    # edges under the markers, faint ones first so the accepted path is drawn over them
    edges = sorted((n for n in record.nodes if n.parent >= 0 and n.parent in position),
                   key=lambda n: n.status in ACCEPTED_STATUSES)
    out.append('<g class="edges" fill="none" stroke-linecap="round">')
    for n in edges:
        out.append(_edge(n, position, labels))
    out.append('</g>')

    out.append('<g class="nodes">')
    for n in record.nodes:
        if n.id in position:
            out.append(_node(n, position[n.id], labels[n.id], n.id in faded))
    out.append('</g>')
    out.extend(legend)
    out.append('</svg>')
    return "\n".join(out) + "\n"


def write_tree_svg(record: StepRecord | None, path: str | Path, title: str | None = None) -> Path:
    """Write tree_svg(record) to path (parent folders created) as a standalone UTF-8 SVG file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + tree_svg(record, title), encoding="utf-8")
    return path


# ---- pieces ----------------------------------------------------------------------------------------------
def _default_title(record: StepRecord) -> str:
    return (f"step {record.step}: {len(record.nodes) - 1} draft nodes (budget {record.budget}, "
            f"{record.budget_mode}), {record.num_accepted_drafts} accepted + 1 bonus")


def _empty_svg(record: StepRecord | None, title: str | None) -> str:
    if title is None:
        title = "No step yet" if record is None else f"step {record.step}"
    message = ("no draft tree: enter a prompt and press Step or Run" if record is None
               else "no draft tree this step (plain decoding)")
    heading, body = _escape(title), _escape(message)
    width = max(_text_width(title, TITLE_PX, bold=True), _text_width(message, TOKEN_PX)) + 2 * PAD
    height = 2 * PAD + TITLE_PX + 14 + TOKEN_PX
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" height="{_n(height)}" '
        f'viewBox="0 0 {_n(width)} {_n(height)}" font-family="{_attr(SANS)}">',
        f'<title>{heading}: {body}</title>',
        f'<rect class="background" x="0" y="0" width="{_n(width)}" height="{_n(height)}" fill="#ffffff"/>',
        f'<text class="title" x="{PAD}" y="{PAD + TITLE_PX}" font-size="{TITLE_PX}" font-weight="bold" '
        f'fill="{TEXT}">{heading}</text>',
        f'<text class="empty" x="{PAD}" y="{PAD + TITLE_PX + 14 + TOKEN_PX}" font-size="{TOKEN_PX}" '
        f'fill="{MUTED}">{body}</text>',
        '</svg>']) + "\n"


def _faded(record: StepRecord) -> set[int]:
    """Nodes in a rejected or unreached subtree (the node itself rejected/unreached, or an ancestor)."""
    parent = {n.id: n.parent for n in record.nodes}
    status = {n.id: n.status for n in record.nodes}
    faded: set[int] = set()
    for n in record.nodes:
        node, seen = n.id, set()
        while node >= 0 and node in parent and node not in seen:
            seen.add(node)
            if node in faded or status[node] in REFUSED_STATUSES:
                faded.add(n.id)
                break
            node = parent[node]
    return faded


def _label(text: str) -> tuple[str, str]:
    """(escaped label, the same text unescaped for measuring): visible_token's symbols, cut when long."""
    cut = len(text) > MAX_TOKEN_CHARS
    shown = visible_token(text[:MAX_TOKEN_CHARS]) + ("…" if cut else "")
    shown = _xml_safe(shown)
    return shown, html.unescape(shown)


def _style(n: NodeRecord) -> tuple[str, str, str]:
    """(status key, fill, ring) as tree_figure draws the node."""
    status = n.shown_status
    fill, ring = group_colours(source_group(n.sources))
    if status in BENT_STATUSES:  # accepted by a rule that bends p: own fill, source's ring
        fill, ring = STATUS_COLOURS[status], fill
    return status, fill, ring


def _node(n: NodeRecord, at: tuple[float, float], label: tuple[str, str], faded: bool) -> str:
    status, fill, ring = _style(n)
    x, y = at
    opacity = f' opacity="{FADED}"' if faded else ""
    tip = (f"{label[0]} (id {n.token_id}) · {_escape(', '.join(n.sources) or 'committed root')} · "
           f"{_escape(status)}" + (f" · target p {n.target_prob:.3f}" if n.target_prob is not None else ""))
    return "\n".join([
        f'<g class="node" data-id="{n.id}" data-status="{_attr(status)}" '
        f'data-sources="{_attr("+".join(n.sources))}"{opacity}>',
        f'<title>{tip}</title>',
        _marker(STATUS_SYMBOLS.get(status, "circle"), x, y, fill, ring, "marker"),
        f'<text class="token" x="{_n(x + RADIUS + LABEL_GAP)}" y="{_n(y)}" dy="0.35em" font-size="{TOKEN_PX}" '
        f'font-family="{_attr(MONO)}" fill="{TEXT}" xml:space="preserve">{label[0]}</text>',
        '</g>'])


def _edge(n: NodeRecord, position, labels) -> str:
    """A curve from the end of the parent's token text to the left of the child's marker."""
    (px, py), (cx, cy) = position[n.parent], position[n.id]
    sx = px + RADIUS + LABEL_GAP + _text_width(labels[n.parent][1], TOKEN_PX, mono=True) + 6
    ex = cx - RADIUS - 4
    if ex - sx < 16:  # should not happen with the column widths, but never draw backwards
        sx = ex - 16
    mid = (sx + ex) / 2
    accepted = n.status in ACCEPTED_STATUSES
    colour, width = ACCEPTED_EDGE if accepted else OTHER_EDGE
    return (f'<path class="edge {"edge-accepted" if accepted else "edge-other"}" data-child="{n.id}" '
            f'd="M {_n(sx)} {_n(py)} C {_n(mid)} {_n(py)}, {_n(mid)} {_n(cy)}, {_n(ex)} {_n(cy)}" '
            f'stroke="{colour}" stroke-width="{width}"/>')


def _marker(symbol: str, x: float, y: float, fill: str, ring: str, css: str) -> str:
    """One marker shape (tree_figure's plotly symbols, drawn by hand); two colours where fill != ring."""
    r = RADIUS
    ring_width = 4 if fill != ring else 2
    paint = f'fill="{fill}" stroke="{ring}" stroke-width="{ring_width}"'
    if symbol == "square":
        s = r * 0.9
        return f'<rect class="{css}" x="{_n(x - s)}" y="{_n(y - s)}" width="{_n(2 * s)}" height="{_n(2 * s)}" {paint}/>'
    if symbol == "diamond":
        s = r * 1.3
        pts = [(x, y - s), (x + s, y), (x, y + s), (x - s, y)]
        return f'<polygon class="{css}" points="{_points(pts)}" {paint} stroke-linejoin="round"/>'
    if symbol == "star":
        outer, inner = r * 1.35, r * 0.6
        pts = [(x + (outer if k % 2 == 0 else inner) * math.sin(k * math.pi / 5),
                y - (outer if k % 2 == 0 else inner) * math.cos(k * math.pi / 5)) for k in range(10)]
        return f'<polygon class="{css}" points="{_points(pts)}" {paint} stroke-linejoin="round"/>'
    if symbol == "x":  # a thick cross in the fill colour, outlined in the ring colour where there are two
        s = r * 0.75
        d = f"M {_n(x - s)} {_n(y - s)} L {_n(x + s)} {_n(y + s)} M {_n(x - s)} {_n(y + s)} L {_n(x + s)} {_n(y - s)}"
        under = (f'<path d="{d}" stroke="{ring}" stroke-width="11" stroke-linecap="round" fill="none"/>'
                 if fill != ring else "")
        return (f'<g class="{css}">{under}<path d="{d}" stroke="{fill}" stroke-width="6" '
                f'stroke-linecap="round" fill="none"/></g>')
    if symbol == "circle-open":  # white inside; a second inner ring where two sources proposed the node
        inner = (f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r - 6)}" fill="none" stroke="{fill}" stroke-width="3"/>'
                 if fill != ring else "")
        return (f'<g class="{css}"><circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r - 1)}" fill="#ffffff" '
                f'stroke="{ring}" stroke-width="3"/>{inner}</g>')
    return f'<circle class="{css}" cx="{_n(x)}" cy="{_n(y)}" r="{r}" {paint}/>'


def _legend(record: StepRecord, width: float, top: float) -> tuple[list[str], float]:
    """Two groups at the bottom: the source groups present (as coloured discs) and the statuses present
    (as grey markers, faded ones faded), then the accepted-path line; items wrap to the canvas width."""
    groups = sorted({source_group(n.sources) for n in record.nodes if n.sources}, key=lambda g: (g.count("+"), g))
    statuses = {n.shown_status for n in record.nodes}
    ordered = [s for s in STATUS_ORDER if s in statuses] + sorted(statuses - set(STATUS_ORDER))
    grey = "#4d4d4d"

    items: list[tuple[str, float, str]] = []  # (row heading, item width, svg drawn at origin 0,0)
    for g in groups:
        fill, ring = group_colours(g)
        items.append(("sources", *_legend_item(_marker("circle", 0, 0, fill, ring, "legend-marker"), g)))
    for s in ordered:
        fill = ring = grey
        if s in BENT_STATUSES:
            fill = STATUS_COLOURS[s]
        marker = _marker(STATUS_SYMBOLS.get(s, "circle"), 0, 0, fill, ring, "legend-marker")
        if s in REFUSED_STATUSES:
            marker = f'<g opacity="{max(FADED, 0.55)}">{marker}</g>'
        items.append(("status", *_legend_item(marker, STATUS_LEGEND.get(s, s))))
    line = (f'<path d="M -14 0 L 26 0" stroke="{ACCEPTED_EDGE[0]}" stroke-width="{ACCEPTED_EDGE[1]}" '
            f'stroke-linecap="round"/>')
    items.append(("status", *_legend_item(line, "accepted path", marker_width=44)))

    out = [f'<line class="legend-rule" x1="{PAD}" y1="{_n(top)}" x2="{_n(width - PAD)}" y2="{_n(top)}" '
           f'stroke="#dddddd" stroke-width="1.5"/>', '<g class="legend">']
    heading_width = max(_text_width(h + ":", LEGEND_PX, bold=True) for h in ("sources", "status")) + 14
    line_height, y, current = 38, top + 16 + 19, None
    x = PAD + heading_width
    for heading, item_width, drawn in items:
        if heading != current:
            if current is not None:
                y += line_height
            current, x = heading, PAD + heading_width
            out.append(f'<text class="legend-heading" x="{PAD}" y="{_n(y)}" dy="0.35em" font-size="{LEGEND_PX}" '
                       f'font-weight="bold" fill="{TEXT}">{heading}:</text>')
        elif x + item_width > width - PAD:
            y += line_height
            x = PAD + heading_width
        out.append(f'<g class="legend-item" transform="translate({_n(x + RADIUS * 1.3)} {_n(y)})">{drawn}</g>')
        x += item_width + 20
    out.append('</g>')
    return out, y - top + 19


def _legend_item(marker: str, name: str, marker_width: float = RADIUS * 2.6) -> tuple[float, str]:
    text = _escape(name)
    drawn = (marker + f'<text x="{_n(marker_width - RADIUS * 1.3 + LABEL_GAP)}" y="0" dy="0.35em" '
             f'font-size="{LEGEND_PX}" fill="{TEXT}">{text}</text>')
    return marker_width + LABEL_GAP + _text_width(name, LEGEND_PX), drawn


# ---- text ------------------------------------------------------------------------------------------------
def _xml_safe(text: str) -> str:
    """Characters XML 1.0 cannot hold even escaped (control characters, lone surrogates, U+FFFE/FFFF):
    control characters become their Unicode control pictures, the rest the replacement character."""
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 and ch not in "\t\n\r" or code == 0x7F:
            out.append(chr(0x2400 + code) if code < 0x20 else "␡")
        elif 0xD800 <= code <= 0xDFFF or code in (0xFFFE, 0xFFFF):
            out.append("\ufffd")
        elif ch == "\r":
            out.append("␍")
        else:
            out.append(ch)
    return "".join(out)


def _escape(text: str) -> str:
    return _xml_safe(html.escape(str(text), quote=False))


def _attr(text: str) -> str:
    return _xml_safe(html.escape(str(text), quote=True))


def _text_width(text: str, size: float, mono: bool = False, bold: bool = False) -> float:
    """Rough rendered width of plain (unescaped) text: no font metrics here, so per character a fraction of the font size (wide and
    full-width characters count double), erring on the wide side so text never overlaps."""
    per = 0.62 if mono else (0.62 if bold else 0.54)
    total = 0.0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 1.0 if unicodedata.east_asian_width(ch) in ("W", "F") else per
    return total * size


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _points(points) -> str:
    return " ".join(f"{_n(px)},{_n(py)}" for px, py in points)
