"""The tree as the page draws it (no model): the offered tree (kept, cut with the planner's reason, the bonus
as its own node), a layout without overlapping labels from 1 to 256 nodes, the SVG (escaped, parseable), and
the order of the step's animation."""

import random
import xml.etree.ElementTree as ET

import pytest

from specviz.records.offered import NOT_RANKED, CutNodes
from specviz.records.plan import BudgetCut, PlanDecision, SourceShare
from specviz.records.status import NodeStatus
from specviz.records.step import NodeRecord, StepRecord
from specviz.render.tree_layout import CANVAS, FONT_PX, MIN_PITCH, Box, layout, text_width
from specviz.render.tree_svg import svg_element, tree_html
from specviz.render.tree_view import (ACCEPT_START, BONUS, COMMIT_AT, CUT, DRAFT_END, PLAN_AT, VERIFY_AT, short_label,
                                  shown_tree)

SVG = "{http://www.w3.org/2000/svg}"
TEXTS = {100: " Rome", 101: ".", 102: " Paris", 103: "<b>&", 104: "\n", 105: " the", 106: "\t", 107: "verylongtokenindeed",
         108: "", 109: "東京"}


def token_text(token: int) -> str:
    return TEXTS.get(token, f"t{token}")


def node(id, parent, depth, token, sources, status, chance=None):
    return NodeRecord(id=id, parent=parent, depth=depth, token_id=token, text=token_text(token), sources=sources,
                      status=NodeStatus(status), target_prob=None if parent < 0 else 0.5, target_rank=0,
                      chance=chance)


def offered_record() -> StepRecord:
    """Root, an accepted retrieval chain of two, a rejected logits sibling with an unreached child; the planner
    cut three nodes: one under the root, one under an accepted node, one under a cut node."""
    nodes = [node(0, -1, 0, 99, [], "root"),
             node(1, 0, 1, 100, ["retrieval"], "accepted", 0.8),
             node(2, 1, 2, 101, ["retrieval", "logits"], "accepted", 0.6),
             node(3, 0, 1, 102, ["logits"], "rejected", 0.1),
             node(4, 3, 2, 103, ["logits"], "unreached", 0.05)]
    cut = CutNodes(parents=[0, 2, 5], tokens=[104, 105, 106], sources=["logits", "logits", "logits"],
                   chances=[0.03, 0.02, 0.01], ranks=[4, 5, NOT_RANKED])
    plan = PlanDecision(predicted_accepted=1.55, expected_curve=[0.0, 0.8, 1.4, 1.5, 1.55, 1.58, 1.6],
                        cut=BudgetCut(offered=7, kept=4, expected_accepted=1.55, draft_ms=2.0, expected_tokens_per_s=60.0),
                        verify_ms=[15.0, 16.0, 16.5, 17.0, 17.2, 19.0, 19.5])
    return StepRecord(step=4, prefix_len=40, budget=4, budget_mode="auto", nodes=nodes,
                      accepted_tokens=[100, 101, 107], accepted_origins=["retrieval", "logits+retrieval", "bonus"],
                      allocation={"retrieval": 2, "logits": 3}, timings_ms={},
                      split={"retrieval": SourceShare(64, 2, 0), "logits": SourceShare(62, 6, 1)}, plan=plan,
                      cut_nodes=cut)


def test_the_offered_tree_holds_the_kept_the_cut_and_the_bonus():
    tree = shown_tree(offered_record(), token_text, offered=True)
    by_id = {n.id: n for n in tree.nodes}
    assert (tree.verified, tree.cut, tree.accepted) == (4, 3, 2) and tree.has_cut
    assert [by_id[i].status for i in (5, 6, 7)] == [CUT, CUT, CUT]
    assert [by_id[i].parent for i in (5, 6, 7)] == [0, 2, 5] and [by_id[i].depth for i in (5, 6, 7)] == [1, 3, 2]
    bonus = by_id[8]
    assert bonus.status == BONUS and bonus.parent == 2 and bonus.depth == 3 and bonus.on_path
    assert bonus.label == short_label("verylongtokenindeed") and bonus.label.endswith("…")
    assert [n.id for n in tree.nodes if n.on_path] == [0, 1, 2, 8]        # the dark path runs to the bonus
    assert {n.id for n in tree.nodes if n.faded} == {3, 4, 5, 6, 7}        # refused subtrees and cut nodes
    # the planner's reason on hover: the chance, the place best-first, the cost and what it would promise
    tip = "\n".join(by_id[6].tip)
    assert "cut by the planner: chance of acceptance 0.020" in tip and "#6 best-first; the planner kept the best 4" in tip
    assert "+2.3 ms" in tip and "tok/s expected" in tip
    assert "its parent was cut too" in "\n".join(by_id[7].tip) and "node limit" in "\n".join(by_id[7].tip)
    assert "kept" in "\n".join(by_id[1].tip) and "accepted" in "\n".join(by_id[1].tip)
    verified = shown_tree(offered_record(), token_text, offered=False)
    assert CUT not in {n.status for n in verified.nodes} and not verified.has_cut
    assert [n.status for n in verified.nodes][-1] == BONUS


def test_the_animation_drafts_source_by_source_then_plans_verifies_accepts_and_commits():
    tree = shown_tree(offered_record(), token_text, offered=True)
    assert tree.stages == ("retrieval", "logits")
    first = [n.appear for n in tree.nodes if n.sources and n.status != BONUS and tree.stages[0] in n.sources]
    second = [n.appear for n in tree.nodes if n.sources and n.status != BONUS and tree.stages[0] not in n.sources]
    assert max(first) < min(second) <= max(second) < DRAFT_END   # each source adds its nodes in turn
    for n in tree.nodes:
        if n.status == CUT:
            assert n.reveal == PLAN_AT                                  # cut when the planner chooses
        elif n.status == BONUS:
            assert n.appear == n.reveal == COMMIT_AT                    # the target's own token, at commit
        elif n.parent >= 0:
            assert VERIFY_AT < ACCEPT_START <= n.reveal < COMMIT_AT     # statuses after the one forward
    path = sorted((n.depth, n.reveal) for n in tree.nodes if n.on_path and n.status not in (BONUS, NodeStatus.ROOT))
    assert [r for _, r in path] == sorted(r for _, r in path)           # the path lights up depth by depth


def test_the_draft_chip_names_the_stages_that_drafted_and_a_silent_stage_apart():
    """A gated model stage that skipped this step proposed nothing: the draft chip does not list it as drafting."""
    from dataclasses import replace

    record = offered_record()
    record = replace(record, split={**record.split, "model": SourceShare(56, 0, 0)})
    tree = shown_tree(record, token_text)
    assert tree.stages == ("retrieval", "logits", "model") and tree.silent == ("model",)
    html = tree_html(record, token_text)
    assert "draft: retrieval → logits (model: nothing)" in html and "logits → model" not in html
    assert "draft: retrieval → logits<" in tree_html(offered_record(), token_text)


def random_nodes(count: int, seed: int):
    """A random offered tree of count draft nodes with tokens of every awkward kind."""
    rng = random.Random(seed)
    nodes = [node(0, -1, 0, 99, [], "root")]
    for i in range(1, count + 1):
        parent = rng.choice(range(max(0, i - 6), i)) if rng.random() < 0.7 else rng.randrange(i)
        nodes.append(node(i, parent, nodes[parent].depth + 1, rng.choice(list(TEXTS) + [200, 201]),
                          [rng.choice(["logits", "retrieval", "model"])], rng.choice(["rejected", "unreached"]),
                          round(rng.random(), 3)))
    record = StepRecord(step=0, prefix_len=9, budget=count, budget_mode="fixed", nodes=nodes, accepted_tokens=[5],
                        accepted_origins=["bonus"], allocation={}, timings_ms={})
    return shown_tree(record, token_text).nodes


@pytest.mark.parametrize("count", [0, 1, 2, 7, 64, 130, 256])
def test_no_two_labels_overlap_and_depths_are_layered(count):
    for seed in range(3):
        nodes = random_nodes(count, seed)
        geometry = layout(nodes)
        boxes = list(geometry.labels.items())
        for i, (a, box_a) in enumerate(boxes):
            for b, box_b in boxes[i + 1:]:
                assert not box_a.overlaps(box_b), (count, seed, a, b)
        r = geometry.radius * 1.4  # the widest marker (a star)
        for a, (x, y) in geometry.centres.items():  # no label over a marker
            mark = Box(x - r, y - r, x + r, y + r)
            assert not any(box.overlaps(mark) for b, box in boxes if b != a), (count, seed, a)
        depth = {n.id: n.depth for n in nodes}
        band = {i: geometry.band_of[d] for i, d in depth.items()}
        for a, (xa, ya) in geometry.centres.items():
            for b, (xb, yb) in geometry.centres.items():
                if depth[b] == depth[a] + 1 and band[b] == band[a]:  # a deeper node is further right, past the labels
                    assert xb - geometry.radius > geometry.column_end[depth[a]]
                if band[b] > band[a]:                                 # a later band lies wholly below
                    assert geometry.labels[b].y0 > geometry.labels[a].y1
        assert geometry.width == pytest.approx(CANVAS[0])  # deep trees wrap into bands: nothing to scroll sideways
        assert geometry.font_px >= 14
        for box in geometry.labels.values():                 # everything on the canvas
            assert 0 < box.x0 < box.x1 <= geometry.width and 0 < box.y0 < box.y1 < geometry.height


def test_small_trees_spread_over_the_box_and_siblings_go_by_chance():
    nodes = random_nodes(7, 1)
    geometry = layout(nodes, canvas=(800, 420))
    ys = [y for _, y in geometry.centres.values()]
    assert max(ys) - min(ys) > 420 / 3  # spread over the height, not packed at the top
    assert geometry.width == 800 and geometry.height == 420
    by_parent = {}
    for n in nodes:
        by_parent.setdefault(n.parent, []).append(n)
    for kids in by_parent.values():  # the likelier sibling above
        ordered = sorted(kids, key=lambda n: geometry.centres[n.id][1])
        chances = [n.chance if n.status != BONUS else 2.0 for n in ordered]
        assert chances == sorted(chances, reverse=True)
    depth = {n.id: n.depth for n in nodes}
    same_depth = [abs(geometry.centres[a][1] - geometry.centres[b][1]) for a in depth for b in depth
                  if a < b and depth[a] == depth[b]]
    assert min(same_depth) >= MIN_PITCH  # a depth's labels are at least a row apart


def test_a_bushy_tree_takes_fewer_rows_than_leaves_and_keeps_its_order():
    """A shallow leaf's row is free to deeper nodes further down (one depth per column): the packing takes
    fewer rows than the tree has leaves, and edges between two columns never cross (children keep their
    parents' order)."""
    for seed in range(3):
        nodes = random_nodes(64, seed)
        geometry = layout(nodes, canvas=(4000, 0))  # one band: the rows are the packing's alone
        parents = {n.parent for n in nodes}
        leaves = sum(1 for n in nodes if n.id not in parents)
        ys = [y for _, y in geometry.centres.values()]
        rows = (max(ys) - min(ys)) / MIN_PITCH + 1  # no room asked for: rows at the smallest pitch
        assert rows < leaves, (seed, rows, leaves)
        y = {i: c[1] for i, c in geometry.centres.items()}
        edges = [(y[n.parent], y[n.id], n.depth) for n in nodes if n.parent >= 0]
        for pa, ca, d in edges:
            for pb, cb, e in edges:
                if d == e and pa < pb:
                    assert ca < cb  # the child of the upper parent stays above


def test_a_deep_chain_wraps_into_bands_that_fill_the_box():
    chain = [node(0, -1, 0, 99, [], "root")] + [node(i, i - 1, i, 100 + i % 10, ["retrieval"], "accepted", 0.9)
                                                for i in range(1, 61)]
    record = StepRecord(step=0, prefix_len=9, budget=60, budget_mode="fixed", nodes=chain, accepted_tokens=[5],
                        accepted_origins=["bonus"], allocation={}, timings_ms={})
    geometry = layout(shown_tree(record, token_text).nodes)
    bands = sorted(set(geometry.band_of.values()))
    assert len(bands) >= 5 and geometry.width == CANVAS[0] and geometry.height <= CANVAS[1] * 1.5
    assert all(geometry.wraps(max(d for d, b in geometry.band_of.items() if b == band)) for band in bands[:-1])
    assert sorted(geometry.band_gap_y) == bands[:-1]


def test_label_widths_are_monospace_advances():
    assert text_width("abcd") == pytest.approx(4 * 0.62 * FONT_PX)
    assert text_width("東京") == pytest.approx(2 * text_width("ab"))


def test_the_svg_parses_escapes_and_shows_whitespace():
    record = offered_record()
    tree = shown_tree(record, token_text, offered=True)
    root = ET.fromstring(svg_element(tree, "tv-offered", animated=True))
    labels = [t.text for t in root.iter(SVG + "text")]
    assert "<b>&" in labels and "⏎" in labels and "⇥" in labels and "␣Rome" in labels   # escaped, then parsed back
    groups = [g for g in root.iter(SVG + "g") if "n" in g.get("class", "").split()]
    assert len(groups) == len(tree.nodes)
    statuses = {g.get("data-status") for g in groups}
    assert {"root", "accepted", "rejected", "unreached", CUT, BONUS} <= statuses
    assert all(float(g.get("opacity")) < 1 for g in groups if g.get("data-status") == CUT)
    html = tree_html(record, token_text, animate=True)
    assert 'class="tv tv-anim"' in html and "tv-offered" in html and "tv-verified" in html
    assert "<b>&" not in html and "&lt;b&gt;&amp;" in html
    assert "plan: keep 4 of 7" in html and "verify: one forward, 5 tokens" in html and "commit: +3 tokens" in html
    still = tree_html(record, token_text, animate=False)
    assert 'class="tv tv-static"' in still and 'class="pulse"' not in still
    plain = StepRecord(step=1, prefix_len=5, budget=0, budget_mode="fixed", nodes=[node(0, -1, 0, 99, [], "root")],
                       accepted_tokens=[102], accepted_origins=["bonus"], allocation={}, timings_ms={})
    html = tree_html(plain, token_text)
    assert "tv-only" in html and "disabled" in html and "␣Paris" in html  # root and bonus, no switch to use
    assert "No step yet" in tree_html(None, token_text)
