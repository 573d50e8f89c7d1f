"""The slide export of a draft tree: a standalone SVG written by hand (no model, no plotly image export)."""

import xml.etree.ElementTree as ET

from specviz.records.status import NodeStatus
from specviz.records.step import NodeRecord, StepRecord
from specviz.ui.slides import tree_svg, write_tree_svg

SVG = "{http://www.w3.org/2000/svg}"
NASTY = 'a<&>"b\nc'


def node(id, parent, depth, text, sources, status, mark=None):
    """A node record; status and mark by their names ("accepted", "transferred")."""
    return NodeRecord(id=id, parent=parent, depth=depth, token_id=100 + id, text=text, sources=sources,
                      status=NodeStatus(status), target_prob=None if parent < 0 else 0.5, target_rank=0,
                      mark=NodeStatus(mark) if mark else None)


def make_record():
    nodes = [
        node(0, -1, 0, " is", [], "root"),
        node(1, 0, 1, " Rome", ["logits", "retrieval"], "accepted"),   # two sources
        node(2, 1, 2, ".", ["retrieval"], "relaxed"),
        node(3, 2, 3, " The", ["logits"], "accepted", mark="transferred"),
        node(4, 0, 1, NASTY, ["retrieval"], "rejected"),
        node(5, 4, 2, " lost", ["retrieval"], "unreached"),          # inside a rejected subtree
        node(6, 1, 2, ",", ["logits"], "rejected"),
        node(7, 0, 1, " Milan", ["model"], "unreached"),
    ]
    return StepRecord(step=3, prefix_len=20, budget=8, budget_mode="fixed", nodes=nodes,
                      accepted_tokens=[101, 102, 103, 9], accepted_origins=["logits+retrieval", "retrieval~relaxed",
                                                                            "logits~transferred", "bonus"],
                      allocation={"logits": 3, "retrieval": 4, "model": 1}, timings_ms={})


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    return root


def classes(element) -> set[str]:
    return set(element.get("class", "").split())


def test_svg_parses_with_one_marker_per_node():
    record = make_record()
    root = parse(tree_svg(record))
    groups = [g for g in root.iter(SVG + "g") if "node" in classes(g)]
    assert sorted(int(g.get("data-id")) for g in groups) == [n.id for n in record.nodes]
    for g in groups:  # exactly one marker in each node group, and one token label
        assert len([e for e in g.iter() if "marker" in classes(e)]) == 1
        assert len([e for e in g.iter(SVG + "text") if "token" in classes(e)]) == 1
    statuses = {int(g.get("data-id")): g.get("data-status") for g in groups}
    assert statuses[3] == "transferred" and statuses[2] == "relaxed"
    assert float(root.get("width")) > 0 and float(root.get("height")) > 0


def test_tokens_are_escaped_and_visible():
    svg = tree_svg(make_record())
    assert "a&lt;&amp;&gt;\"b⏎c" in svg   # markup escaped, the newline shown as a symbol
    assert "<&>" not in svg
    labels = [t.text for t in parse(svg).iter(SVG + "text") if "token" in classes(t)]
    assert 'a<&>"b⏎c' in labels and "␣Rome" in labels


def test_marker_shapes_and_two_source_ring():
    root = parse(tree_svg(make_record()))
    markers = {int(g.get("data-id")): next(e for e in g.iter() if "marker" in classes(e))
               for g in root.iter(SVG + "g") if "node" in classes(g)}
    assert markers[0].tag == SVG + "rect"                       # root square
    assert markers[1].tag == SVG + "circle"                     # accepted: filled circle
    assert markers[1].get("fill") != markers[1].get("stroke")  # two sources: fill one, ring the other
    assert markers[2].tag == SVG + "polygon" and len(markers[2].get("points").split()) == 4  # relaxed diamond
    assert markers[3].tag == SVG + "polygon" and len(markers[3].get("points").split()) == 10  # star
    assert markers[6].tag == SVG + "g" and markers[7].tag == SVG + "g"  # x and open circle are composites


def test_accepted_edges_thicker_and_faded_subtrees():
    root = parse(tree_svg(make_record()))
    edges = {int(e.get("data-child")): e for e in root.iter(SVG + "path") if "edge" in classes(e)}
    assert sorted(edges) == [1, 2, 3, 4, 5, 6, 7]
    accepted = [float(edges[i].get("stroke-width")) for i in (1, 2, 3)]
    others = [float(edges[i].get("stroke-width")) for i in (4, 5, 6, 7)]
    assert min(accepted) > max(others)
    assert all("edge-accepted" in classes(edges[i]) for i in (1, 2, 3))
    groups = {int(g.get("data-id")): g for g in root.iter(SVG + "g") if "node" in classes(g)}
    faded = {i for i, g in groups.items() if g.get("opacity") is not None and float(g.get("opacity")) < 1}
    assert faded == {4, 5, 6, 7}


def test_title_and_legend():
    record = make_record()
    root = parse(tree_svg(record))
    title = next(t for t in root.iter(SVG + "text") if "title" in classes(t))
    assert title.text == "step 3: 7 draft nodes (budget 8, fixed), 3 accepted + 1 bonus"
    legend = next(g for g in root.iter(SVG + "g") if "legend" in classes(g))
    words = [t.text for t in legend.iter(SVG + "text")]
    for name in ("logits", "retrieval", "model", "logits+retrieval"):
        assert name in words
    assert "search" not in words and "deepen" not in words   # only the sources present
    for status in ("committed root", "accepted", "accepted (relaxed)", "accepted by p_hat", "rejected",
                   "not reached", "accepted path"):
        assert status in words
    custom = parse(tree_svg(record, title='slide <3> & "more"'))
    assert next(t for t in custom.iter(SVG + "text") if "title" in classes(t)).text == 'slide <3> & "more"'


def test_layout_fits_the_canvas():
    root = parse(tree_svg(make_record()))
    width, height = float(root.get("width")), float(root.get("height"))
    for g in (g for g in root.iter(SVG + "g") if "node" in classes(g)):
        text = next(t for t in g.iter(SVG + "text") if "token" in classes(t))
        assert 0 < float(text.get("x")) < width and 0 < float(text.get("y")) < height
        assert int(text.get("font-size")) >= 16


def test_empty_cases_parse():
    for record, expected in ((None, "No step yet"), (StepRecord(
            step=1, prefix_len=5, budget=0, budget_mode="fixed", nodes=[node(0, -1, 0, "x", [], "root")],
            accepted_tokens=[7], accepted_origins=["bonus"], allocation={}, timings_ms={}), "step 1")):
        root = parse(tree_svg(record))
        texts = [t.text for t in root.iter(SVG + "text")]
        assert texts[0] == expected and "no draft tree" in texts[1]
        assert not [g for g in root.iter(SVG + "g") if "node" in classes(g)]
    assert "<b>" not in tree_svg(None, title="<b>")


def test_control_characters_and_long_tokens_stay_valid():
    record = make_record()
    record.nodes[7].text = "\x00\x07\r\ud800" + "z" * 60
    root = parse(tree_svg(record))
    label = next(t.text for g in root.iter(SVG + "g") if g.get("data-id") == "7"
                 for t in g.iter(SVG + "text") if "token" in classes(t))
    assert label.startswith("␀␇␍\ufffd") and label.endswith("…") and len(label) <= 22


def test_write_tree_svg(tmp_path):
    path = write_tree_svg(make_record(), tmp_path / "deep" / "tree.svg")
    assert path.exists() and ET.parse(path).getroot().tag == SVG + "svg"
