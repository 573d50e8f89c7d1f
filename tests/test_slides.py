"""The slide export of a draft tree: the page's drawing as a standalone SVG (no model, no plotly image export)."""

import xml.etree.ElementTree as ET

from specviz.records.status import NodeStatus
from specviz.records.step import NodeRecord, StepRecord
from specviz.render.slides import tree_svg, write_tree_svg

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


def node_groups(root):
    return {int(g.get("data-id")): g for g in root.iter(SVG + "g") if "n" in classes(g)}


def final_marker(group):
    """The status marker of a node group (the first element of its m-final group)."""
    final = next(g for g in group.iter(SVG + "g") if "m-final" in classes(g))
    return list(final)[0]


def label_of(group):
    return next(t for t in group.iter(SVG + "text") if "lbl" in classes(t))


def test_svg_parses_with_one_marker_per_node():
    record = make_record()
    root = parse(tree_svg(record, token_text=lambda t: f"<{t}>"))
    groups = node_groups(root)
    # every node of the record, and the bonus token as a node of its own (id 8, after the accepted path)
    assert sorted(groups) == [n.id for n in record.nodes] + [8]
    assert groups[8].get("data-status") == "bonus" and label_of(groups[8]).text == "<9>"
    for g in groups.values():  # one status marker and one label per node; a still drawing has no draft marker
        assert len([e for e in g.iter(SVG + "g") if "m-final" in classes(e)]) == 1
        assert not list(next(e for e in g.iter(SVG + "g") if "m-draft" in classes(e)))
        assert len([e for e in g.iter(SVG + "text") if "lbl" in classes(e)]) == 1
    assert groups[3].get("data-status") == "transferred" and groups[2].get("data-status") == "relaxed"
    assert float(root.get("width")) > 0 and float(root.get("height")) > 0


def test_tokens_are_escaped_and_visible():
    svg = tree_svg(make_record())
    assert "a&lt;&amp;&gt;\"b⏎c" in svg   # markup escaped, the newline shown as a symbol
    assert "<&>" not in svg
    labels = [label_of(g).text for g in node_groups(parse(svg)).values()]
    assert 'a<&>"b⏎c' in labels and "␣Rome" in labels


def test_marker_shapes_carry_the_status_and_two_sources_two_colours():
    markers = {i: final_marker(g) for i, g in node_groups(parse(tree_svg(make_record()))).items()}
    assert markers[0].tag == SVG + "rect"                       # root square
    assert markers[1].tag == SVG + "circle"                     # accepted: filled circle
    assert markers[1].get("fill") != markers[1].get("stroke")  # two sources: fill one, ring the other
    assert markers[2].tag == SVG + "polygon" and len(markers[2].get("points").split()) == 4  # relaxed diamond
    assert markers[3].tag == SVG + "polygon" and len(markers[3].get("points").split()) == 10  # transferred star
    assert markers[8].tag == SVG + "polygon" and len(markers[8].get("points").split()) == 6   # bonus hexagon
    assert markers[6].tag == SVG + "g" and markers[7].tag == SVG + "g"  # cross and open circle are composites


def test_accepted_edges_thicker_and_faded_subtrees():
    root = parse(tree_svg(make_record()))
    edges = {int(e.get("data-child")): e for e in root.iter(SVG + "path") if "e" in classes(e)}
    dark = {int(e.get("data-child")): e for e in root.iter(SVG + "path") if "e-path" in classes(e)}
    assert sorted(edges) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert sorted(dark) == [1, 2, 3, 8]  # the accepted path, through to the bonus token
    assert min(float(e.get("stroke-width")) for e in dark.values()) > max(
        float(e.get("stroke-width")) for e in edges.values())
    faded = {i for i, g in node_groups(root).items() if g.get("opacity") is not None and float(g.get("opacity")) < 1}
    assert faded == {4, 5, 6, 7}


def test_title_and_legend():
    record = make_record()
    root = parse(tree_svg(record))
    title = next(t for t in root.iter(SVG + "text") if "title" in classes(t))
    assert title.text == "step 3: 7 draft nodes verified · 3 accepted + 1 bonus"
    legend = next(g for g in root.iter(SVG + "g") if "legend" in classes(g))
    words = [t.text for t in legend.iter(SVG + "text")]
    for name in ("logits", "retrieval", "model"):
        assert name in words
    assert "search" not in words and "deepen" not in words   # only the sources present
    for status in ("root (last committed token)", "accepted", "accepted, relaxed rule", "accepted by p_hat",
                   "rejected", "not reached", "bonus (the target's own token)", "accepted path"):
        assert status in words
    custom = parse(tree_svg(record, title='slide <3> & "more"'))
    assert next(t for t in custom.iter(SVG + "text") if "title" in classes(t)).text == 'slide <3> & "more"'


def test_layout_fits_the_canvas():
    root = parse(tree_svg(make_record()))
    width, height = float(root.get("width")), float(root.get("height"))
    for g in node_groups(root).values():
        text = label_of(g)
        assert 0 < float(text.get("x")) < width and 0 < float(text.get("y")) < height
        assert float(text.get("font-size")) >= 16


def test_empty_cases_parse():
    root = parse(tree_svg(None))
    texts = [t.text for t in root.iter(SVG + "text")]
    assert texts[0] == "No step yet" and "no draft tree" in texts[1]
    assert not node_groups(root)
    plain = StepRecord(step=1, prefix_len=5, budget=0, budget_mode="fixed", nodes=[node(0, -1, 0, "x", [], "root")],
                       accepted_tokens=[7], accepted_origins=["bonus"], allocation={}, timings_ms={})
    groups = node_groups(parse(tree_svg(plain, token_text=lambda t: "y")))  # plain decoding: root and bonus
    assert [g.get("data-status") for g in groups.values()] == ["root", "bonus"]
    assert "<b>" not in tree_svg(None, title="<b>")


def test_control_characters_and_long_tokens_stay_valid():
    record = make_record()
    record.nodes[7].text = "\x00\x07\r\ud800" + "z" * 60
    root = parse(tree_svg(record))
    label = label_of(node_groups(root)[7]).text
    assert label.startswith("␀␇␍\ufffd") and label.endswith("…") and len(label) <= 12


def test_write_tree_svg(tmp_path):
    path = write_tree_svg(make_record(), tmp_path / "deep" / "tree.svg")
    assert path.exists() and ET.parse(path).getroot().tag == SVG + "svg"
