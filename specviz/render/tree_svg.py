"""A shown tree drawn as SVG: the page's tree box (animated, hover tips, the offered / verified switch) and
the same drawing for slides. Colour = source (Okabe-Ito, safe for colour-blind eyes; a node two sources
proposed is filled in one colour and ringed in the other); marker shape = status, so nothing depends on
colour alone; the accepted path dark through to the bonus token; refused subtrees and cut nodes faded.

Why our own SVG and not plotly: labels must never overlap and must sit beside their markers, never on the
edges; we lay the tree out ourselves (tree_layout) in a monospace font whose widths we know, which plotly's
scatter text cannot promise. Each node is an element we can time with CSS (the step's animation), the
drawing is a few kilobytes instead of a figure and plotly's script, and the slide export is the same
drawing instead of a second one."""

from __future__ import annotations

import math
from typing import Callable

from specviz.records.status import NodeStatus
from specviz.records.step import StepRecord
from specviz.tree import sources as source_registry
from specviz.render.svg_text import attr, escape, num, points
from specviz.render.tree_layout import CANVAS, LABEL_GAP, RADIUS, TreeGeometry, layout
from specviz.render.tree_view import (ACCEPT_START, BONUS, COMMIT_AT, CUT, DRAFT_END, PLAN_AT, STILL_AT, VERIFY_AT,
                                  ShownNode, ShownTree, shown_tree)

MONO = "'DejaVu Sans Mono', ui-monospace, Menlo, Consolas, monospace"
ROOT_COLOUR, BONUS_COLOUR, TEXT, SEVERAL = "#8c8c8c", "#000000", "#1a1a1a", "#999999"
FADED = 0.42   # opacity of cut nodes and of rejected / unreached subtrees
PATH_EDGE, EDGE, CUT_EDGE = ("#222222", 3.5), ("#b0b0b0", 1.5), ("#c4c4c4", 1.2)
SHAPES = {NodeStatus.ROOT: "square", NodeStatus.ACCEPTED: "circle", NodeStatus.RELAXED: "diamond",
          NodeStatus.TRANSFERRED: "star", NodeStatus.REJECTED: "cross", NodeStatus.UNREACHED: "open",
          CUT: "dashed", BONUS: "hexagon"}
STATUS_NAMES = {NodeStatus.ROOT: "root (last committed token)", NodeStatus.ACCEPTED: "accepted",
                NodeStatus.RELAXED: "accepted, relaxed rule", NodeStatus.TRANSFERRED: "accepted by p_hat",
                NodeStatus.REJECTED: "rejected", NodeStatus.UNREACHED: "not reached", CUT: "cut by the planner",
                BONUS: "bonus (the target's own token)"}
STATUS_ORDER = (NodeStatus.ROOT, NodeStatus.ACCEPTED, NodeStatus.RELAXED, NodeStatus.TRANSFERRED, BONUS,
                NodeStatus.REJECTED, NodeStatus.UNREACHED, CUT)


def source_colour(name: str) -> str:
    return source_registry.colour(name) if source_registry.is_source(name) else SEVERAL


def node_colours(node: ShownNode) -> tuple[str, str]:
    """(fill, ring): one source fills and rings alike; two: filled in one colour, ringed in the other."""
    if node.status == NodeStatus.ROOT:
        return ROOT_COLOUR, ROOT_COLOUR
    if node.status == BONUS:
        return BONUS_COLOUR, BONUS_COLOUR
    names = sorted(node.sources) or ["?"]
    return source_colour(names[-1]), source_colour(names[0])


# ---- markers ------------------------------------------------------------------------------------------------
def marker(shape: str, x: float, y: float, fill: str, ring: str, r: float = RADIUS) -> str:
    """One marker; where fill and ring differ, both colours show (two sources proposed the node)."""
    two = fill != ring
    paint = f'fill="{fill}" stroke="{ring}" stroke-width="{3 if two else 1.5}"'
    if shape == "square":
        s = r * 0.85
        return f'<rect x="{num(x - s)}" y="{num(y - s)}" width="{num(2 * s)}" height="{num(2 * s)}" {paint}/>'
    if shape == "diamond":
        s = r * 1.25
        return f'<polygon points="{points([(x, y - s), (x + s, y), (x, y + s), (x - s, y)])}" {paint}/>'
    if shape == "star":
        outer, inner = r * 1.35, r * 0.6
        pts = [(x + (outer if k % 2 == 0 else inner) * math.sin(k * math.pi / 5),
                y - (outer if k % 2 == 0 else inner) * math.cos(k * math.pi / 5)) for k in range(10)]
        return f'<polygon points="{points(pts)}" {paint} stroke-linejoin="round"/>'
    if shape == "hexagon":
        pts = [(x + r * 1.1 * math.cos(k * math.pi / 3), y + r * 1.1 * math.sin(k * math.pi / 3)) for k in range(6)]
        return f'<polygon points="{points(pts)}" fill="{fill}" stroke="#ffffff" stroke-width="1.5"/>'
    if shape == "cross":
        s = r * 0.7
        d = f"M{num(x - s)} {num(y - s)}L{num(x + s)} {num(y + s)}M{num(x - s)} {num(y + s)}L{num(x + s)} {num(y - s)}"
        under = f'<path d="{d}" stroke="{ring}" stroke-width="8" stroke-linecap="round"/>' if two else ""
        return f'<g fill="none">{under}<path d="{d}" stroke="{fill}" stroke-width="4.5" stroke-linecap="round"/></g>'
    if shape in ("open", "dashed"):
        dash = ' stroke-dasharray="3 2.4"' if shape == "dashed" else ""
        inner = (f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r - 4.5)}" fill="none" stroke="{fill}" '
                 f'stroke-width="2.5"{dash}/>' if two else "")
        return (f'<g><circle cx="{num(x)}" cy="{num(y)}" r="{num(r - 1)}" fill="#ffffff" stroke="{ring}" '
                f'stroke-width="2.5"{dash}/>{inner}</g>')
    return f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}" {paint}/>'


# ---- one tree as SVG ----------------------------------------------------------------------------------------
def tree_svg_body(tree: ShownTree, geometry: TreeGeometry, highlight: int | None = None,
                  animated: bool = False) -> list[str]:
    """Edges then nodes (labels last in each node, over everything before them). animated: with the drafted
    marker and the verify pulse each node shows while its step plays (a still drawing has neither)."""
    by_id = {n.id: n for n in tree.nodes}
    out = ['<g class="tv-edges" fill="none" stroke-linecap="round">']
    for n in tree.nodes:
        if n.parent >= 0:
            out.extend(_edge(n, by_id[n.parent], geometry))
    out.append('</g><g class="tv-nodes">')
    for n in tree.nodes:
        out.append(_node(n, geometry, n.id == highlight, animated))
    out.append('</g>')
    return out


def _edge(child: ShownNode, parent: ShownNode, g: TreeGeometry) -> list[str]:
    """From the end of the parent's label along its own row to the end of its depth's label column, then a
    curve to the child's marker; into the next band of a wrapped tree, down the right margin, along the gap
    between the bands and in from the left margin: an edge never crosses a label."""
    (px, py), (cx, cy) = g.centres[parent.id], g.centres[child.id]
    start, column_end = g.labels[parent.id].x1 + 3, g.column_end[parent.depth] + 4
    end = cx - g.radius - 3
    if g.wraps(parent.depth):
        right, left, gap_y = g.width - 6, 6, g.band_gap_y[g.band_of[parent.depth]]
        d = (f"M{num(start)} {num(py)}H{num(right)}V{num(gap_y)}H{num(left)}V{num(cy)}H{num(end)}")
    else:
        mid = (column_end + end) / 2
        d = f"M{num(start)} {num(py)}H{num(column_end)}C{num(mid)} {num(py)},{num(mid)} {num(cy)},{num(end)} {num(cy)}"
    colour, width = CUT_EDGE if child.status == CUT else EDGE
    dash = ' stroke-dasharray="4 3"' if child.status == CUT else ""
    timing = f'style="--a:{child.appear};--r:{child.reveal}"'
    out = [f'<path class="e{" e-cut" if child.status == CUT else ""}" data-child="{child.id}" d="{d}" '
           f'stroke="{colour}" stroke-width="{width}"{dash} {timing}/>']
    if child.on_path:
        out.append(f'<path class="e-path" data-child="{child.id}" d="{d}" pathLength="1" stroke="{PATH_EDGE[0]}" '
                   f'stroke-width="{PATH_EDGE[1]}" {timing}/>')
    return out


def _node(n: ShownNode, g: TreeGeometry, picked: bool, animated: bool) -> str:
    x, y = g.centres[n.id]
    fill, ring = node_colours(n)
    label = g.labels[n.id]
    classes = f"n n-{n.status}" + (" faded" if n.faded else "") + (" on-path" if n.on_path else "")
    draft = (marker("circle", x, y, fill, ring, g.radius * 0.8)
             if animated and n.status not in (NodeStatus.ROOT, BONUS) else "")
    pulse = (f'<circle class="pulse" cx="{num(x)}" cy="{num(y)}" r="{num(g.radius)}" fill="none" '
             f'stroke="#222" stroke-width="2"/>' if animated and n.status not in (CUT, BONUS) else "")
    ring_picked = (f'<circle class="picked" cx="{num(x)}" cy="{num(y)}" r="{num(g.radius * 2)}" fill="none" '
                   f'stroke="#000" stroke-width="3"/>' if picked else "")
    weight = ' font-weight="bold"' if n.on_path else ""
    opacity = f' opacity="{FADED}"' if n.faded else ""
    return (f'<g class="{classes}" data-id="{n.id}" data-status="{attr(n.status)}" '
            f'data-sources="{attr("+".join(n.sources))}" data-tip="{attr(chr(10).join(n.tip))}" '
            f'style="--a:{n.appear};--r:{n.reveal}"{opacity}><g class="n-in">{ring_picked}'
            f'<g class="m-draft">{draft}</g><g class="m-final">{marker(SHAPES[n.status], x, y, fill, ring, g.radius)}</g>'
            f'{pulse}<text class="lbl" x="{num(label.x0)}" y="{num(y)}" dy="0.35em" font-size="{num(g.font_px)}"'
            f'{weight} fill="{TEXT}" stroke="#ffffff" stroke-width="3" paint-order="stroke" '
            f'xml:space="preserve">{escape(n.label)}</text></g></g>')


def svg_element(tree: ShownTree, css: str, highlight: int | None = None, animated: bool = False,
                canvas: tuple[float, float] = CANVAS) -> str:
    """The tree as one <svg> element for the page: as wide as its box, never narrower than its layout (the box
    scrolls); the page's script narrows a tall one to fit its box's height while its labels stay MIN_LABEL_PX or
    more (data-font: the labels' size in the layout)."""
    geometry = layout(tree.nodes, canvas)
    body = "".join(tree_svg_body(tree, geometry, highlight, animated))
    return (f'<svg class="tv-svg {css}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {num(geometry.width)} '
            f'{num(geometry.height)}" width="{num(geometry.width)}" height="{num(geometry.height)}" '
            f'style="min-width:{num(geometry.width)}px" data-font="{num(geometry.font_px)}" font-family="{attr(MONO)}" '
            f'role="img" '
            f'aria-label="{attr(tree.title)}">{body}</svg>')


# ---- the page's tree box ------------------------------------------------------------------------------------
def tree_html(record: StepRecord | None, token_text: Callable[[int], str], animate: bool = False,
              highlight: int | None = None, empty: str = "No step yet: press Step or Run, or replay a trace.",
              panels: dict[str, bool] | None = None, run: str = "", steps: int | None = None,
              streaming: bool = False) -> str:
    """The tree box: its title, the offered / verified switch, the step's phases (animated while it plays),
    the drawing (both views when the planner cut something; CSS shows the one the switch picked), the
    legend and the hover tip. panels: which of the page's other panels have something to show, as flags
    (data-has-NAME) the page's CSS hides the others by. run ("live", "replay:NAME") and steps (the run's steps
    so far) are written as data-run and data-steps: the page's state as data, for scripts and tests. streaming
    (a Run's steps as they come): the verified tree alone, the cut nodes counted on the switch and drawn when the
    Run stops (the browser draws beside the server on a laptop: most of an offered tree is cut, and each
    streamed step would redraw it)."""
    flags = "".join(f' data-has-{name}="{int(bool(shown))}"' for name, shown in (panels or {}).items())
    flags += f' data-run="{attr(run)}"' if run else ""
    flags += f' data-steps="{int(steps)}"' if steps is not None else ""
    if record is None:
        return (f'<div class="tv tv-static"{flags}><div class="tv-bar"><span class="tv-title">{escape(empty)}</span>'
                '</div></div>')
    offered = shown_tree(record, token_text, offered=True)
    verified = shown_tree(record, token_text, offered=False) if offered.has_cut else offered
    if offered.has_cut and streaming:
        drawings = svg_element(verified, "tv-only", highlight, False)
    elif offered.has_cut:
        drawings = (svg_element(offered, "tv-offered", highlight, animate)
                    + svg_element(verified, "tv-verified", highlight, animate))
    else:
        drawings = svg_element(offered, "tv-only", highlight, animate)
    mode = "tv-anim" if animate else "tv-static"
    return (f'<div class="tv {mode}" data-step="{attr(record.step)}"{flags}>'
            f'<div class="tv-bar"><span class="tv-title">{escape(offered.title)}</span>{_switch(offered, streaming)}'
            f'{_phases(offered, record)}</div><div class="tv-frame"><div class="tv-scroll">{drawings}</div>{MORE_HINTS}</div>'
            f'{legend_html(offered)}<div class="tv-tip" role="tooltip"></div></div>')


# shown by the page's script over the box's edges while part of a tall tree is scrolled out of it
MORE_HINTS = ('<span class="tv-more tv-more-up" aria-hidden="true">&#8593; more of the tree above</span>'
              '<span class="tv-more tv-more-down" aria-hidden="true">more of the tree below &#8595; scroll</span>')
MIN_LABEL_PX = 14   # the smallest label size the page's script may narrow a tall tree to


def _switch(tree: ShownTree, streaming: bool = False) -> str:
    disabled = "" if tree.has_cut and not streaming else " disabled"
    why = (' title="While Run streams steps the verified tree is drawn alone; the cut nodes are drawn when it stops."'
           if tree.has_cut and streaming else "" if tree.has_cut else
           ' title="The planner cut nothing this step: what was offered was verified."')
    return (f'<span class="tv-switch" role="group" aria-label="which tree"{why}>'
            f'<button type="button" class="tv-sw tv-sw-offered" data-tree-view="offered"{disabled}>'
            f'offered {tree.verified + tree.cut}</button>'
            f'<button type="button" class="tv-sw tv-sw-verified" data-tree-view="verified"{disabled}>'
            f'verified {tree.verified}</button></span>')


def _phases(tree: ShownTree, record: StepRecord) -> str:
    """The step's phases as chips; while the step plays, each lights up in its part of the play interval."""
    tokens = len(record.accepted_tokens)
    drafted = [stage for stage in tree.stages if stage not in tree.silent]
    silent = f" ({', '.join(tree.silent)}: nothing)" if tree.silent else ""
    chips = [("draft", 0.0, DRAFT_END, "draft: " + (" → ".join(drafted) or "nothing") + (silent if drafted else ""))]
    if tree.has_cut:
        chips.append(("plan", PLAN_AT, VERIFY_AT, f"plan: keep {tree.verified} of {tree.verified + tree.cut}"))
    chips += [("verify", VERIFY_AT, ACCEPT_START, f"verify: one forward, {tree.verified + 1} tokens"),
              ("accept", ACCEPT_START, COMMIT_AT, f"accept: {tree.accepted}"),
              ("commit", COMMIT_AT, STILL_AT, f"commit: +{tokens} token{'s' if tokens != 1 else ''}")]
    return '<span class="tv-phases">' + "".join(
        f'<span class="ph ph-{name}" style="--a:{start};--d:{round(end - start, 3)}">{escape(text)}</span>'
        for name, start, end, text in chips) + "</span>"


def legend_html(tree: ShownTree) -> str:
    """The sources present (colour) and the statuses present (shape), each drawn as the tree draws it."""
    items = []
    for name in sorted({s for n in tree.nodes for s in n.sources}):
        colour = source_colour(name)
        items.append(_legend_item(f'<circle cx="10" cy="10" r="7" fill="{colour}"/>', name))
    present = {n.status for n in tree.nodes}
    for status in STATUS_ORDER:
        if status in present:
            colour = BONUS_COLOUR if status == BONUS else ROOT_COLOUR if status == NodeStatus.ROOT else "#555555"
            items.append(_legend_item(marker(SHAPES[status], 10, 10, colour, colour, 7), STATUS_NAMES[status]))
    items.append(_legend_item(f'<path d="M1 10H19" stroke="{PATH_EDGE[0]}" stroke-width="{PATH_EDGE[1]}"/>',
                              "accepted path"))
    return '<div class="tv-legend">' + "".join(items) + "</div>"


def _legend_item(drawn: str, name: str) -> str:
    return (f'<span class="tv-key"><svg width="20" height="20" viewBox="0 0 20 20" aria-hidden="true">{drawn}</svg>'
            f'{escape(name)}</span>')


# ---- CSS and the script of the tree box ---------------------------------------------------------------------
# (Gradio prefixes each rule with its container's classes, so a rule keyed on <body> needs !important to win;
# and it drops an `animation` shorthand that holds var(): the animations are written in longhands)
# the animation reads --pace (seconds per step, the play pace: the page's script keeps it current) and each
# element's --a (appears), --r (turns into its status) as fractions of one play interval
TREE_CSS = f"""
:root {{ --pace: 2; }}
.tv {{ position: relative; }}
.tv-bar {{ display: flex; flex-wrap: wrap; align-items: center; gap: 6px 10px; font-size: 15px; margin-bottom: 4px; }}
.tv-title {{ font-weight: 600; }}
.tv-switch {{ display: inline-flex; border: 1px solid #999; border-radius: 6px; overflow: hidden; }}
.tv-sw {{ font-size: 14px; padding: 1px 8px; background: #fff; color: #222; border: 0; cursor: pointer; }}
.tv-sw[disabled] {{ color: #999; cursor: default; }}
body:not(.tv-show-verified) .tv-sw-offered:not([disabled]), body.tv-show-verified .tv-sw-verified:not([disabled])
  {{ background: #222 !important; color: #fff !important; }}
body:not(.tv-show-verified) .tv-verified, body.tv-show-verified .tv-offered {{ display: none !important; }}
.tv-phases {{ display: inline-flex; flex-wrap: wrap; gap: 4px; font-size: 14px; }}
.ph {{ padding: 0 6px; border-radius: 10px; background: #eee; color: #444; white-space: nowrap; }}
.tv-anim .ph {{ animation-name: tv-ph; animation-duration: calc(var(--pace) * var(--d) * 1s);
  animation-timing-function: linear; animation-delay: calc(var(--pace) * var(--a) * 1s); }}
@keyframes tv-ph {{ from, to {{ background: #222; color: #fff; }} }}
.tv-frame {{ position: relative; }}
.tv-scroll {{ overflow: auto; max-height: var(--tree-max-height, calc(100vh - 250px)); }}
.tv-svg {{ display: block; width: 100%; height: auto; margin: 0 auto; background: #fff; }}
.tv-more {{ position: absolute; right: 14px; display: none; padding: 1px 9px; border-radius: 10px; font-size: 14px;
  background: rgba(34, 34, 34, 0.82); color: #fff; pointer-events: none; }}
.tv-more-up {{ top: 4px; }}
.tv-more-down {{ bottom: 4px; }}
.tv-frame.more-up .tv-more-up, .tv-frame.more-down .tv-more-down {{ display: block; }}
.tv-svg .n {{ cursor: default; }}
.tv-anim .n-in, .tv-anim .e {{ animation-name: tv-in; animation-duration: calc(var(--pace) * 0.05s);
  animation-timing-function: ease-out; animation-fill-mode: both; animation-delay: calc(var(--pace) * var(--a) * 1s); }}
.tv-anim .faded {{ animation-name: tv-fade; animation-duration: calc(var(--pace) * 0.06s); animation-fill-mode: both;
  animation-delay: calc(var(--pace) * var(--r) * 1s); }}
.tv-anim .m-draft {{ animation-name: tv-out; animation-duration: 0.01s; animation-fill-mode: both;
  animation-delay: calc(var(--pace) * var(--r) * 1s); }}
.tv-anim .m-final {{ animation-name: tv-show; animation-duration: calc(var(--pace) * 0.04s); animation-fill-mode: both;
  animation-delay: calc(var(--pace) * var(--r) * 1s); }}
.tv-anim .e-path {{ stroke-dasharray: 1; animation-name: tv-draw; animation-duration: calc(var(--pace) * 0.05s);
  animation-fill-mode: both; animation-delay: calc(var(--pace) * (var(--r) - 0.04) * 1s); }}
.tv-anim .pulse {{ transform-box: fill-box; transform-origin: center; animation-name: tv-pulse;
  animation-duration: calc(var(--pace) * {round(ACCEPT_START - VERIFY_AT, 3)}s); animation-fill-mode: both;
  animation-delay: calc(var(--pace) * {VERIFY_AT}s); }}
@keyframes tv-in {{ from {{ opacity: 0; transform: translateX(-10px); }} to {{ opacity: 1; transform: none; }} }}
@keyframes tv-fade {{ from {{ opacity: 1; }} to {{ opacity: {FADED}; }} }}
@keyframes tv-out {{ from {{ opacity: 1; }} to {{ opacity: 0; }} }}
@keyframes tv-show {{ from {{ opacity: 0; }} to {{ opacity: 1; }} }}
@keyframes tv-draw {{ from {{ stroke-dashoffset: 1; }} to {{ stroke-dashoffset: 0; }} }}
@keyframes tv-pulse {{ 0% {{ opacity: 0; transform: scale(1); }} 30% {{ opacity: 1; }} 100% {{ opacity: 0; transform: scale(2.2); }} }}
.tv-legend {{ display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 14px; color: #333; margin-top: 4px; }}
.tv-key {{ display: inline-flex; align-items: center; gap: 4px; white-space: nowrap; }}
.tv-tip {{ position: fixed; z-index: 1000; display: none; max-width: 420px; padding: 6px 9px; border-radius: 6px;
  background: #222; color: #fff; font-size: 14px; line-height: 1.35; white-space: pre-line; pointer-events: none; }}
.tv-tip.on {{ display: block; }}
"""

# js_on_load of the tree box: hover tips, the offered / verified switch (a class on <body>, so it survives
# every update of the box), and on each new value the step's animation from its start at the current pace
TREE_JS = """
const MIN_LABEL_PX = """ + str(MIN_LABEL_PX) + """;
const tip = () => element.querySelector('.tv-tip');
const pace = () => parseFloat(document.querySelector('#pace input')?.value) || 2;
// a tree taller than its box: scroll so that the accepted path is in the middle of it
const centre = () => {
  const box = element.querySelector('.tv-scroll');
  if (!box || box.scrollHeight <= box.clientHeight) return;
  const path = Array.from(box.querySelectorAll('g.on-path')).filter((g) => g.getClientRects().length);
  if (!path.length) return;
  const top = box.getBoundingClientRect().top;
  const ys = path.map((g) => { const r = g.getBoundingClientRect(); return (r.top + r.bottom) / 2 - top + box.scrollTop; });
  box.scrollTop = Math.max(0, (Math.min(...ys) + Math.max(...ys)) / 2 - box.clientHeight / 2);
};
// a tree taller than its box: narrower (so shorter), down to labels of MIN_LABEL_PX px, before the box scrolls
const fit = () => {
  const box = element.querySelector('.tv-scroll');
  if (!box) return;
  const limit = getComputedStyle(box).maxHeight;  // px, or a share of the frame that holds it
  const room = limit.endsWith('px') ? parseFloat(limit) : box.parentElement.clientHeight;
  for (const svg of box.querySelectorAll('svg.tv-svg')) {
    const view = svg.viewBox.baseVal;
    const narrowest = view.width * MIN_LABEL_PX / (parseFloat(svg.dataset.font) || MIN_LABEL_PX);
    svg.style.minWidth = narrowest + 'px';
    svg.style.width = Math.min(box.clientWidth, Math.max(narrowest, room * view.width / view.height)) + 'px';
  }
};
// the hints over the box's edges: which parts of a tall tree are scrolled out of it
const edges = () => {
  const box = element.querySelector('.tv-scroll');
  const frame = element.querySelector('.tv-frame');
  if (!box || !frame) return;
  frame.classList.toggle('more-up', box.scrollTop > 2);
  frame.classList.toggle('more-down', box.scrollTop + box.clientHeight < box.scrollHeight - 2);
};
const restart = () => {
  document.documentElement.style.setProperty('--pace', String(pace()));
  // every animation of the step from its start, finished ones too (a chip's, which holds no end state, is
  // already over when a busy page calls this late): the class off, a reflow, the class on
  const root = element.querySelector('.tv.tv-anim');
  if (root) { root.classList.remove('tv-anim'); void root.offsetWidth; root.classList.add('tv-anim'); }
  fit();
  centre();
  edges();
};
element.addEventListener('scroll', edges, true);
// the box wider or narrower (a resized window, presentation mode): fit again
let boxWidth = 0;
new ResizeObserver(() => {
  if (element.clientWidth === boxWidth) return;
  boxWidth = element.clientWidth;
  fit();
  edges();
}).observe(element);
element.addEventListener('mouseover', (event) => {
  const node = event.target.closest('[data-tip]');
  const box = tip();
  if (!box) return;
  if (!node) { box.classList.remove('on'); return; }
  box.textContent = node.dataset.tip;
  box.classList.add('on');
});
element.addEventListener('mousemove', (event) => {
  const box = tip();
  if (box && box.classList.contains('on')) {
    box.style.left = Math.min(event.clientX + 14, window.innerWidth - box.offsetWidth - 8) + 'px';
    box.style.top = Math.min(event.clientY + 14, window.innerHeight - box.offsetHeight - 8) + 'px';
  }
});
element.addEventListener('mouseleave', () => tip()?.classList.remove('on'));
element.addEventListener('click', (event) => {
  const button = event.target.closest('[data-tree-view]');
  if (button && !button.disabled) {
    document.body.classList.toggle('tv-show-verified', button.dataset.treeView === 'verified');
    fit();
    centre();
    edges();
  }
});
watch('value', restart);
restart();
"""

