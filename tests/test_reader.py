"""READER and unified: the indexes against brute force, the datastore's errors, lossless on every suite
prompt with the real model, widening / deepening in the tree, self-skip drafting, and bad settings."""

import random
from pathlib import Path

import numpy as np
import pytest

from specviz.drafters.search_path import DeepenDrafter, SearchIndexes
from specviz.engine.costmodel import CostModel
from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.errors import SpecvizError
from specviz.index.datastore import Datastore, build, shared_datastore
from specviz.index.ngram_trie import NgramTrie
from specviz.index.suffix_array import SuffixArray, build_suffix_array
from specviz.records.notes import ModelStageNote, SearchNote
from specviz.runtime.layer_skip import self_skip_model
from specviz.runtime.draft_model_spec import shared_draft
from specviz.studies.self_repetition import self_repetition
from specviz.tree.draft_tree import DraftTree

ASSETS = Path(__file__).parent.parent / "assets"
SUITE = [i for i in load_suite(ASSETS / "suite.jsonl") if i.category != "long-context"]  # see test_rapid
FLAT_COST = CostModel(sizes=[1, 2, 64, 128], ms=[50.0, 55.0, 120.0, 200.0], context_len=512, model="test",
                      device="cpu", dtype="float32", threads=2)


def brute_counts(stream, key):
    counts = {}
    for i in range(len(stream) - len(key)):
        if stream[i:i + len(key)] == key and stream[i + len(key)] >= 0:
            counts[stream[i + len(key)]] = counts.get(stream[i + len(key)], 0) + 1
    return counts


@pytest.mark.parametrize("seed", range(4))
def test_suffix_array_and_trie_match_brute_force(seed):
    rng = random.Random(seed)
    stream = [rng.randint(0, 6) for _ in range(600)]
    assert build_suffix_array(np.array(stream)).tolist() == sorted(range(len(stream)), key=lambda i: stream[i:])
    array, trie = SuffixArray(np.array(stream)), NgramTrie(depth=5)
    trie.feed(stream)
    for _ in range(40):
        key = [rng.randint(0, 6) for _ in range(rng.randint(1, 4))]
        expected = brute_counts(stream, key)
        found = array.find(key)
        assert (array.counts(found) if found else {}) == expected
        if expected:
            match = trie.match(key)
            assert match.length == len(key) and trie.counts(match) == expected


@pytest.mark.parametrize("seed", range(3))
def test_bisected_match_is_the_longest_suffix_with_a_follower(seed):
    rng = random.Random(seed)
    stream = [rng.choice([-1, 0, 1, 2, 3]) for _ in range(400)]  # -1: document separators
    array = SuffixArray(np.array(stream))
    for _ in range(80):
        tail = [rng.randint(0, 4) for _ in range(rng.randint(1, 9))]
        longest = next((n for n in range(min(len(tail), 8), 0, -1) if brute_counts(stream, tail[-n:])), 0)
        found = array.match(tail, 8)
        assert (found.length if found else 0) == longest
        if found:
            assert array.counts(found) == brute_counts(stream, tail[-longest:])


@pytest.mark.parametrize("seed", range(3))
def test_extending_a_match_equals_matching_from_scratch(seed):
    """The search grows its query a token at a time; the shortcuts (a full-length match is tried at full
    length first, a failed extension bounds the retry) must land where a fresh lookup does."""
    rng = random.Random(seed)
    stream = [rng.choice([-1, 0, 1, 2, 3]) for _ in range(500)]
    array, trie = SuffixArray(np.array(stream)), NgramTrie(depth=5)
    trie.feed(stream)
    for _ in range(20):
        tail = [rng.randint(0, 3) for _ in range(3)]
        in_array, in_trie = array.match(tail, 4), trie.match(tail)
        for _ in range(12):
            token = rng.randint(0, 3)
            tail = (tail + [token])[-4:]
            fresh = array.match(tail, 4)
            in_array = array.extend(in_array, token, tail, 4) if in_array else array.match(tail, 4)
            if fresh is None:
                assert in_array is None
            else:
                assert (in_array.lo, in_array.hi, in_array.length) == (fresh.lo, fresh.hi, fresh.length)
            in_trie = trie.extend(in_trie, token, tail) if in_trie else trie.match(tail)
            assert in_trie == trie.match(tail)


def brute_search(streams, query, depth, key_len, min_path_share=0.0):
    """SearchPath by brute force: per level, each index's counts after its longest matching suffix; the
    longest match wins, equal lengths add; the top token (ties: lowest id) goes on; stop below the cut."""
    path, query, reach = [], list(query), 1.0
    for _ in range(depth):
        found = []  # (length, counts, name)
        for name, stream in streams:
            for length in range(min(len(query), key_len), 0, -1):
                counts = brute_counts(stream, query[-length:])
                if counts:
                    found.append((length, counts, name))
                    break
        if not found:
            break
        longest = max(length for length, _, _ in found)
        merged = {}
        for length, counts, _ in found:
            if length == longest:
                for token, count in counts.items():
                    merged[token] = merged.get(token, 0) + count
        token = min(merged, key=lambda t: (-merged[t], t))
        share = merged[token] / sum(merged.values())
        reach *= share
        if reach < min_path_share:
            break
        names = "+".join(sorted({name for length, _, name in found if length == longest}))
        # the planner's prior: the share smoothed as the automaton's (once out of once is 0.5)
        path.append((token, share, longest, names, merged[token] / (sum(merged.values()) + 1)))
        query.append(token)
    return path


@pytest.mark.parametrize("seed", range(3))
def test_search_path_equals_brute_force_and_stops_at_the_path_share(seed):
    """The search counts only the indexes with the longest match, and a branch stops before the token that
    would bring the product of its shares below min_path_share."""
    rng = random.Random(seed)
    corpus = [rng.choice([-1, 0, 1, 2, 3, 4]) for _ in range(500)]   # -1: document separators
    context = [rng.randint(0, 4) for _ in range(rng.randint(20, 120))]
    indexes = SearchIndexes(key_len=4, datastore=Datastore(SuffixArray(np.array(corpus))))
    indexes.sync(context)
    streams = [("datastore", corpus), ("trie", context)]
    cut_short = 0
    for _ in range(30):
        query = context + [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
        full = indexes.search(query, 10)
        assert full == brute_search(streams, query, 10, key_len=4)
        for share in (0.05, 0.3):
            cut = indexes.search(query, 10, min_path_share=share)
            assert cut == brute_search(streams, query, 10, key_len=4, min_path_share=share)
            assert cut == full[:len(cut)]
            cut_short += len(cut) < len(full)
    assert cut_short > 0  # the cut was exercised


def test_frequency_merge_adds_both_indexes_where_longest_lets_the_longer_match_win():
    """READER's Algorithm 2 ranks A ∪ B by frequency: the trie's counts after its match and the datastore's
    after its own, added, whatever their lengths; `longest` (ours) counts only the longer match."""
    context = [1, 2, 3, 9] + [3, 9] * 2 + [7, 7, 3]   # the trie matches 1 2 3 (length 3): 9 once
    corpus = [5, 2, 3, 4] * 3 + [8, 3, 4] * 4          # the datastore matches 2 3 (length 2): 4 three times
    for merge, expected in (("longest", 9), ("frequency", 4)):
        indexes = SearchIndexes(key_len=4, datastore=Datastore(SuffixArray(np.array(corpus))), merge=merge)
        indexes.sync(context)
        (token, share, length, where, prior), = indexes.search([1, 2, 3], 1)
        assert prior < share
        assert token == expected, merge
        assert where == ("trie" if merge == "longest" else "datastore+trie")


def test_longest_suffix_is_tried_first_then_shorter_ones():
    array = SuffixArray(np.array([1, 2, 3, 9, 5, 3, 7]))
    assert array.match([8, 2, 3], 3).length == 2        # [8, 2, 3] absent, [2, 3] -> 9
    assert array.counts(array.match([8, 2, 3], 3)) == {9: 1}
    assert array.match([4, 4], 2) is None


def test_self_repetition_counts_pointer_advances():
    assert self_repetition([1, 2, 3], [1, 2, 3, 9, 1, 2, 3, 9]) == pytest.approx(8 / 3)
    assert self_repetition([], [5, 6, 7]) == 1.0
    store = Datastore(None)
    store.add([5, 6, 7])
    assert self_repetition([], [5, 6, 7], store) == 3.0


def test_datastore_missing_corrupt_and_empty_files_say_how_to_rebuild(tmp_path, lm):
    with pytest.raises(SpecvizError, match="datastore build"):
        Datastore.load(tmp_path / "none.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a numpy file at all")
    with pytest.raises(SpecvizError, match="unreadable.*datastore build"):
        Datastore.load(bad)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"response": "The cat sat on the mat."}\n')
    report = build(lm, corpus, tmp_path / "tiny.npz")
    assert report["documents"] == 1 and report["tokens"] > 3
    store = Datastore.load(tmp_path / "tiny.npz")
    ids = lm.tokenizer("The cat sat on the mat.", add_special_tokens=False).input_ids
    assert store.static.counts(store.static.find(ids[:2])) == {ids[2]: 1}
    corpus.write_text("")
    with pytest.raises(SpecvizError, match="no responses"):
        build(lm, corpus, tmp_path / "empty.npz")


def test_shipped_datastore_holds_the_corpus(lm):
    store = shared_datastore(lm)
    assert store.documents >= 50 and len(store) > 5000


@pytest.mark.parametrize("item", SUITE, ids=[i.id for i in SUITE])
def test_unified_is_lossless_on_every_suite_prompt(lm, ar_outputs, item):
    """Fixed budget 48 and the model stage on: every step verifies all sources at once."""
    session = Session(lm, "unified", {"model_stage": "on", "draft_depth": 2}, budget=48,
                      draft=shared_draft(lm, "self-skip:6")).start(item.messages)
    session.run(40)
    assert session.output_ids == ar_outputs[item.id][:40]



def test_unified_model_stage_drafts_first_so_no_other_source_starves_it(lm):
    """A step that runs the model stage has paid for its draft forwards: its tree drafts first, so neither
    the automaton (which can fill a budget alone on copied text) nor the warm copy-logit table takes its
    room, and the deepening below it follows."""
    item = next(i for i in SUITE if i.id == "sum-lighthouse")
    session = Session(lm, "unified", {"model_stage": "on", "draft_depth": 2}, budget=12,
                      draft=shared_draft(lm, "self-skip:6")).start(item.messages)
    session.run(16)
    assert all(list(r.split) == ["model", "retrieval", "search", "deepen", "logits"] for r in session.records)
    assert all(r.split["model"].offered == 12 and r.allocation["model"] > 0 for r in session.records)
    assert any(r.split["retrieval"].proposed > 0 for r in session.records)
    # the gated stage ran every step (model_stage=on) and said so, before the searches' notes
    assert all(isinstance(r.drafter_notes[0], ModelStageNote) and r.drafter_notes[0].ran for r in session.records)
    assert any("deepen" in n.sources for r in session.records for n in r.nodes)

@pytest.mark.parametrize("item_id", ["sum-lighthouse", "code-rename", "conv-trip", "open-story", "math-train"])
def test_reader_is_lossless_with_both_draft_models(lm, ar_outputs, item_id):
    item = next(i for i in SUITE if i.id == item_id)
    for draft in (None, shared_draft(lm, "self-skip:8")):
        session = Session(lm, "reader", budget=32, draft=draft).start(item.messages)
        session.run(40)
        assert session.output_ids == ar_outputs[item_id][:40]


@pytest.mark.parametrize("method", ["reader", "unified"])
def test_auto_budget_reader_and_unified_are_lossless(lm, ar_outputs, method):
    item = next(i for i in SUITE if i.id == "qa-cheese")
    session = Session(lm, method, budget="auto", cost_model=FLAT_COST,
                      draft=shared_draft(lm, "self-skip:8")).start(item.messages)
    session.run(40)
    assert session.output_ids == ar_outputs["qa-cheese"][:40]
    assert all(r.plan is not None and r.plan.cut is not None for r in session.records)


def test_widening_and_deepening_branches_carry_their_sources(lm):
    item = next(i for i in SUITE if i.id == "sum-lighthouse")
    session = Session(lm, "reader", {"d_search": 10, "d_deep": 5}, budget=64).start(item.messages)
    session.run(30)
    sources = {s for r in session.records for n in r.nodes for s in n.sources}
    assert {"model", "search", "deepen"} <= sources
    deepened = [(r, n) for r in session.records for n in r.nodes if "deepen" in n.sources]
    for record, node in deepened[:20]:  # a deepened node hangs below the draft model's branch
        by_id = {n.id: n for n in record.nodes}
        ancestor = by_id[node.parent]
        while "model" not in ancestor.sources and ancestor.parent >= 0:
            ancestor = by_id[ancestor.parent]
        assert "model" in ancestor.sources
    assert any((search := r.note(SearchNote)) and search.tokens for r in session.records)


def test_deepening_seed_follows_the_draft_models_best_children():
    tree = DraftTree(1)
    low = tree.add(0, 5, "model", draft_prob=0.2)
    high = tree.add(0, 6, "model", draft_prob=0.7)
    tree.add(low, 7, "model", draft_prob=0.9)
    best = tree.add(high, 8, "model", draft_prob=0.6)
    tree.add(high, 9, "model", draft_prob=0.3)
    tree.add(0, 4, "search")
    assert DeepenDrafter.seed_node(tree, 2) == best
    assert DeepenDrafter.seed_node(tree, 1) == high
    assert DeepenDrafter.seed_node(DraftTree(1), 2) is None


def test_self_skip_drafts_with_the_first_layers(lm, prefix_ids):
    """The skip model's forward equals the target's first K layers + norm + head (same weights)."""
    import torch
    from transformers import DynamicCache

    from specviz.runtime.block_forward import masked_forward

    skip = self_skip_model(lm, 4)
    cache = DynamicCache(config=skip.model.config)
    visible = torch.ones((len(prefix_ids), len(prefix_ids)), dtype=torch.bool).tril()
    logits = masked_forward(skip, cache, prefix_ids, list(range(len(prefix_ids))), visible)
    out = lm.model(input_ids=torch.tensor([prefix_ids]), output_hidden_states=True)
    inner = lm.model.model
    expected = lm.model.lm_head(inner.norm(out.hidden_states[4]))[0]
    assert torch.allclose(logits, expected, atol=1e-4)
    assert len(cache.layers) == 4 and skip.vocab_size == lm.vocab_size


def test_missing_datastore_turns_the_branch_off_and_says_so(lm, monkeypatch, tmp_path):
    import specviz.drafters.search_path as search_module

    monkeypatch.setattr(search_module, "shared_datastore",
                        lambda lm: (_ for _ in ()).throw(SpecvizError("No datastore at 'x': rebuild it")))
    session = Session(lm, "reader", budget=16).start("Say hello.")
    assert any("Datastore branch off" in w for w in session.method.warnings)
    session.run(4)
    assert session.records[0].note(SearchNote).datastore.startswith("off")
    off = Session(lm, "reader", {"datastore": 0}, budget=16).start("Say hello.")
    assert off.method.warnings == []


@pytest.mark.parametrize("params, message", [
    ({"d_search": 0}, "d_search must be between 1 and 64"),
    ({"d_search": 10_000}, "d_search must be between 1 and 64"),
    ({"deepen": 2}, "deepen must be between 0 and 1"),
    ({"model_stage": "sometimes"}, "model_stage must be one of"),
])
def test_bad_reader_settings_are_clear_errors(lm, params, message):
    with pytest.raises(SpecvizError, match=message):
        Session(lm, "unified", params)


@pytest.mark.parametrize("spec, message", [
    ("self-skip:0", "between 1 and 29"), ("self-skip:30", "between 1 and 29"), ("self-skip:x", "self-skip:K"),
])
def test_bad_self_skip_specs_are_clear_errors(lm, spec, message):
    with pytest.raises(SpecvizError, match=message):
        shared_draft(lm, spec)


def test_another_vocabulary_draft_is_refused(lm, tiny_models):
    with pytest.raises(SpecvizError, match="another vocabulary"):
        shared_draft(lm, tiny_models["other"])
