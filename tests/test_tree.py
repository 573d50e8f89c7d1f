import numpy as np
import pytest

from specviz.tree import sources
from specviz.tree.draft_tree import DraftTree


def build():
    tree = DraftTree(7)
    a = tree.add_path([1, 2, 3], "retrieval", scores=[0.9, 0.8, 0.7])
    b = tree.add_path([4, 5], "logits", parent=a[0], scores=[0.6, 0.5])
    c = tree.add_path([6], "model", scores=[0.95])
    return tree, a, b, c


def test_add_merges_same_token_under_same_parent():
    tree, a, _, _ = build()
    again = tree.add(0, 1, "logits", score=0.3)
    assert again == a[0]
    assert tree.sources[again] == {"retrieval", "logits"}
    assert tree.num_drafted == 6


def test_union_merges_shared_prefix_and_costs_once():
    left = DraftTree(7)
    left.add_path([1, 2, 3], "retrieval")
    right = DraftTree(7)
    right.add_path([1, 2, 9], "logits")
    right.add_path([5], "logits")
    merged = left.union(right)
    assert merged.num_drafted == 5          # 1, 2 shared; 3, 9, 5 distinct
    node_1 = merged.child_with_token(0, 1)
    node_2 = merged.child_with_token(node_1, 2)
    assert merged.sources[node_1] == {"retrieval", "logits"}
    assert sorted(merged.tokens[c] for c in merged.children(node_2)) == [3, 9]
    assert merged.allocation() == {"logits": 4, "retrieval": 3, "model": 0}
    assert left.num_drafted == 3 and right.num_drafted == 4  # inputs untouched


def test_merge_grows_the_tree_in_place_like_union():
    left, right = DraftTree(7), DraftTree(7)
    left.add_path([1, 2, 3], "retrieval")
    right.add_path([1, 2, 9], "logits")
    right.add_path([5], "logits")
    expected = left.union(right)
    merged = left.merge(right)
    assert merged is left
    assert (merged.tokens, merged.parents, merged.sources) == (expected.tokens, expected.parents, expected.sources)


def test_positions_are_sibling_indices():
    tree, a, b, c = build()
    for node in range(1, len(tree)):
        assert tree.positions[node] == tree.children(tree.parents[node]).index(node)
    assert tree.select(range(len(tree))).positions == tree.positions


def test_union_refuses_other_root():
    with pytest.raises(ValueError):
        DraftTree(1).union(DraftTree(2))


def test_truncate_is_breadth_first_by_score():
    tree, a, b, c = build()
    kept = tree.truncate(3)
    # depth 1 first (tokens 6 then 1 by score), then the best depth-2 node (2 scores 0.8 > 4 scores 0.6)
    assert sorted(kept.tokens[1:]) == [1, 2, 6]
    assert all(kept.depths[n] <= 2 for n in range(len(kept)))
    assert tree.truncate(0).num_drafted == 0
    assert tree.truncate(100) is tree


def test_truncate_never_keeps_orphans():
    rng = np.random.default_rng(0)
    for _ in range(50):
        tree = DraftTree(0)
        for _ in range(40):
            parent = int(rng.integers(0, len(tree)))
            tree.add(parent, int(rng.integers(1, 6)), "logits", score=float(rng.random()))
        for budget in (1, 5, 17):
            kept = tree.truncate(budget)
            assert kept.num_drafted == min(budget, tree.num_drafted)
            assert all(kept.parents[n] < n for n in range(1, len(kept)))


def test_ancestor_mask_and_paths():
    tree, a, b, c = build()
    mask = tree.ancestor_mask()
    assert mask.shape == (7, 7)
    for node in range(len(tree)):
        expected = {node} | set(tree.path_to(node)) | {0}
        assert set(np.flatnonzero(mask[node])) == expected
    assert sorted(map(tuple, tree.paths())) == sorted([(0, a[0], a[1], a[2]), (0, a[0], b[0], b[1]), (0, c[0])])
    assert tree.depths == [0, 1, 2, 3, 2, 3, 1]


def test_select_requires_parents():
    tree, a, _, _ = build()
    with pytest.raises(ValueError):
        tree.select([a[1]])


def test_sources_are_an_open_registry():
    assert {s.family for s in sources.SOURCES.values()} == set(sources.FAMILIES)
    sources.register("test-source", "retrieval", "#123456", "a source added by a test")
    try:
        tree = DraftTree(1)
        tree.add(0, 5, "test-source")
        assert tree.allocation()["test-source"] == 1
        from specviz.render.step_panels import colour_of, source_legend_html
        assert colour_of("test-source") == "#123456" and "test-source" in source_legend_html()
    finally:
        del sources.SOURCES["test-source"]
    with pytest.raises(ValueError):
        DraftTree(1).add(0, 5, "nowhere")
