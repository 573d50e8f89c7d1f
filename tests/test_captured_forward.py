"""The captured verify path (runtime.captured_forward) as far as a CPU can check it: the static cache's forward,
padded to its bucket, gives the eager forward's logits; its device-made summary is what acceptance computes
from the logits; compaction, prefill and a pickled cache keep the tokens; every method is lossless on it; a
capture that fails falls back with a note; the switches refuse what they cannot do. The graphs themselves
need CUDA: tests/gpu_checks.sh times and checks them there."""

import pickle

import numpy as np
import pytest
import torch

from specviz.accept import verification
from specviz.accept.verification import LogitTop, node_target_stats
from specviz.cli import main
from specviz.engine.session import Session
from specviz.engine.tree_forward import tree_forward, verify_tree
from specviz.errors import SpecvizError
from specviz.methods import METHODS
from specviz.runtime import captured_forward
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.captured_forward import BUCKETS, ForwardOps, ancestor_closure, bucket_for, summarise
from specviz.runtime.kv import keep_accepted
from specviz.runtime.loading import load_model
from specviz.runtime.static_kv import StaticKV
from specviz.tree.draft_tree import DraftTree


def _tree(root: int) -> DraftTree:
    tree = DraftTree(root)
    a = tree.add_path([5, 6, 7], "retrieval")
    tree.add_path([8, 9], "logits", parent=a[0])
    tree.add_path([10], "model")
    return tree


def _random_tree(rng: np.random.Generator, n: int) -> DraftTree:
    tree = DraftTree(int(rng.integers(100, 1000)))
    for _ in range(n - 1):
        tree.add_path([int(rng.integers(100, 1000))], "model", parent=int(rng.integers(0, len(tree))))
    return tree


@pytest.fixture
def tiny(tiny_models):
    lm = load_model(tiny_models["same"], graphs="off")
    yield lm
    captured_forward.install(lm, "off")


def test_the_summary_width_is_acceptances():
    assert captured_forward.TOP_K == verification.TOP_K


def test_ancestor_closure_is_the_trees_mask_with_padding_rows_alone():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 33, 64):
        tree = _random_tree(rng, n)
        width = bucket_for(n)
        parents = torch.tensor([0, *tree.parents[1:], *range(n, width)])
        closure = ancestor_closure(parents).numpy()
        assert (closure[:n, :n] == tree.ancestor_mask()).all()
        assert not closure[:n, n:].any() and (closure[n:, n:] == np.eye(width - n, dtype=bool)).all()


def test_buckets_hold_a_root_and_a_power_of_two():
    assert [bucket_for(n) for n in (1, 2, 3, 4, 65, 66, 257)] == [1, 2, 3, 5, 65, 129, 257]
    assert bucket_for(258) is None and BUCKETS[-1] == 257


def test_the_device_summary_is_what_acceptance_computes_from_the_logits():
    torch.manual_seed(0)
    logits = torch.randn(6, 300)
    logits[2, 10] = logits[2, 20] = logits[2].max() + 1  # a tie at the top: the lower id first
    tree = DraftTree(1)
    for parent, token in ((0, 10), (0, 20), (2, 5), (1, 7), (4, 299)):
        tree.add_path([token], "model", parent=parent)
    rows = summarise(logits, torch.tensor([0, *tree.parents[1:]]), torch.tensor(tree.tokens)).numpy()
    mine = LogitTop.from_device_summary(rows, tree)
    theirs = LogitTop(*(t.numpy() for t in verification.top_logits(logits, verification.TOP_K)))
    assert (mine.ids_np == theirs.ids_np).all() and mine.ids_np[2, 0] == 10
    assert np.allclose(mine.values_np, theirs.values_np) and np.allclose(mine.log_norms_np, theirs.log_norms_np)
    probs, ranks, _ = node_target_stats(tree, logits, theirs)
    assert (mine.token_ranks == ranks).all()
    assert np.allclose(mine.token_probs[1:], probs[1:], rtol=1e-5) and np.isnan(mine.token_probs[0])
    entropy = -(torch.log_softmax(logits, -1).exp() * torch.log_softmax(logits, -1)).sum(-1)
    assert np.allclose(mine.entropies, entropy.numpy(), atol=1e-5)


def test_static_padded_forward_gives_the_eager_logits_and_compacts_alike(tiny):
    past = [11, 12, 13, 14, 15]
    eager = tiny.new_cache()
    causal_forward(tiny, eager, past)
    captured_forward.install(tiny, "static")
    assert tiny.verifier is not None and tiny.verifier.pad and not tiny.graphs
    static = tiny.new_cache()
    assert isinstance(static, StaticKV) and "static" in tiny.describe()
    causal_forward(tiny, static, past)
    for step in range(3):  # a tree, its accepted path kept (scattered: a gather), then the next tree on top
        tree = _tree(16 + step)
        want, want_features = tree_forward(tiny, eager, tree, len(past), features=True)
        verified = verify_tree(tiny, static, tree, len(past), features=True)
        got, got_features = verified.logits, verified.features
        assert static.get_seq_length() == len(past) + len(tree) == eager.get_seq_length()
        assert torch.allclose(got, want, atol=1e-5, rtol=0) and torch.allclose(got_features, want_features, atol=1e-5)
        # acceptance reads the summary the device made, handed to it beside the logits
        assert verified.summary is not None and verified.summary.rows.shape[0] == len(tree)
        top = LogitTop.of(got, tree, summary=verified.summary)
        assert top.argmax == LogitTop.of(want, tree).argmax == LogitTop.of(got, tree).argmax
        assert np.array_equal(top.values_np, verified.summary.rows[:, :verification.TOP_K])
        kept = [0, 1, 4]  # root, then a node whose child is not next in the block
        keep_accepted(eager, len(past), kept)
        keep_accepted(static, len(past), kept)
        past = past + [tree.tokens[n] for n in kept]
        assert static.get_seq_length() == len(past)


def test_every_method_is_lossless_on_the_static_path_and_a_pickled_cache_carries_on(tiny):
    captured_forward.install(tiny, "static")
    prompt = "the cat sat on the mat and the dog sat on the cat"
    reference = Session(tiny, "ar", budget=8).start(prompt)
    reference.run(24)
    # every registered method but ar (the reference) and rapid (a document's question; tests/test_rapid.py)
    for method in [m for m in METHODS if m not in ("ar", "rapid")]:
        session = Session(tiny, method, budget=16).start(prompt)
        session.step()
        session.cache = pickle.loads(pickle.dumps(session.cache))  # as a session's state travels (runtime.state_pickle)
        assert session.cache.owner is None
        session.run(24)
        assert session.output_ids == reference.output_ids, method
        assert session.cache.owner is tiny.verifier  # adopted into one of the verifier's buffers
    captured_forward.install(tiny, "off")
    eager = Session(tiny, "ar", budget=8).start(prompt)
    eager.run(24)
    assert eager.output_ids == reference.output_ids


def test_a_failed_capture_runs_uncaptured_with_a_note(tiny):
    captured_forward.install(tiny, "static")
    verifier = tiny.verifier
    verifier.capture = True  # on a CPU, torch.cuda's stream cannot be made: the capture fails as it would on CUDA
    try:
        session = Session(tiny, "racer", budget=8).start("the cat sat on the mat")
        session.run(8)
    finally:
        verifier.capture = False
    assert session.output_ids and verifier.replays == 0
    assert any("capture failed" in note for note in verifier.notes)


def test_the_switches_refuse_what_cannot_run_here(tiny, capsys):
    assert captured_forward.install(tiny, "on").startswith("CUDA graphs need a CUDA device")
    assert tiny.verifier is None
    with pytest.raises(ValueError, match="choose one of"):
        captured_forward.install(tiny, "sometimes")
    with pytest.raises(SpecvizError, match="choose one of"):
        load_model(tiny.name, graphs="sometimes")
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--suite", "assets/heldout.jsonl", "--methods", "ar", "--graphs", "maybe"])
    assert stopped.value.code == 2 and "invalid choice: 'maybe'" in capsys.readouterr().err
    assert main(["dev", "overhead", "--suite", "assets/heldout.jsonl", "--method", "racer", "--model", tiny.name,
                 "--graphs", "both"]) == 2
    assert "--graphs both compares CUDA graphs with the eager forward: it needs a CUDA device" in capsys.readouterr().err


def test_the_fewer_kernel_variants_give_the_same_logits(tiny):
    captured_forward.install(tiny, "static")
    past = [11, 12, 13, 14, 15]
    results = []
    for ops in (ForwardOps(), ForwardOps(fused_norm=True), ForwardOps(True, True), ForwardOps(True, True, True)):
        tiny.verifier.set_ops(ops)
        cache = tiny.new_cache()
        causal_forward(tiny, cache, past)
        results.append(tree_forward(tiny, cache, _tree(16), len(past)))
    tiny.verifier.set_ops(ForwardOps())
    for logits in results[1:]:
        assert torch.allclose(logits, results[0], atol=1e-5, rtol=0)


def test_the_heads_static_levels_give_the_eager_levels(tiny):
    """runtime.captured_head on a CPU (uncaptured, padded to buckets): a feed of committed positions, then tree levels
    that see scattered ancestors, then a crop and more levels: logits and predicted features as the eager head's
    dynamic cache gives them, through a cache pickled mid-way."""
    from test_head import random_head
    from specviz.runtime.captured_head import CapturedHead

    head = random_head(tiny)
    eager_cache = head.new_cache()
    captured_forward.install(tiny, "static")
    static_cache = head.new_cache()
    assert isinstance(static_cache, StaticKV) and isinstance(head.static_runner(), CapturedHead)
    rng = torch.Generator().manual_seed(3)
    hidden = head.feature_width

    def both(n_rows: int, visible: torch.Tensor, positions: list[int]):
        nonlocal static_cache
        features = torch.randn(n_rows, hidden, generator=rng)
        tokens = torch.randint(0, 2000, (n_rows,), generator=rng).tolist()
        eager = head.forward(features, tokens, positions, visible, eager_cache)
        static = head.forward(features, tokens, positions, visible, static_cache)
        for a, b in zip(eager, static):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-4), (a - b).abs().max()
        assert torch.equal(eager[0].argmax(-1), static[0].argmax(-1))
        assert static_cache.get_seq_length() == eager_cache.get_seq_length()

    feed = 37
    both(feed, torch.ones((feed, feed), dtype=torch.bool).tril(), list(range(feed)))
    static_cache = pickle.loads(pickle.dumps(static_cache))  # carried whole to another process, then adopted
    for width in (1, 3, 6, 11):  # levels of a tree: each row sees the committed entries, a random ancestor set, itself
        start = eager_cache.get_seq_length()
        visible = torch.zeros((width, start + width), dtype=torch.bool)
        visible[:, :feed] = True
        visible[:, feed:start] = torch.rand((width, start - feed), generator=rng) < 0.3
        visible[torch.arange(width), start + torch.arange(width)] = True
        both(width, visible, [feed + 1 + width] * width)
    for cache in (eager_cache, static_cache):
        cache.crop(-(cache.get_seq_length() - feed))  # the proposal's draft entries leave, as the drafter crops them
    both(2, torch.ones((2, feed + 2), dtype=torch.bool).tril(feed), [feed, feed + 1])


def test_methods_drafting_with_the_head_are_lossless_on_the_static_path(tiny):
    """unified and reader draft with the head's static levels and emit ar's tokens (greedy), and a session carried
    without its caches (runtime.state_pickle) rebuilds them on that path and goes on with the same tokens."""
    from test_head import random_head
    from specviz.runtime import shared_resources, state_pickle

    head = random_head(tiny)
    # shared resources travel as keys, as the app's model and head do
    shared_resources.shared(("test-static-model",), lambda: tiny)
    shared_resources.shared(("test-static-head",), lambda: head)
    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):"
    reference = Session(tiny, "ar").start(prompt)
    reference.run(24)
    captured_forward.install(tiny, "static")
    runner = head.static_runner()
    for method, params in (("unified", {"model_stage": "on"}), ("reader", {})):
        session = Session(tiny, method, params, budget=16, draft=head).start(prompt)
        session.run(8)
        moved = state_pickle.loads(state_pickle.dumps(session))  # its caches left behind, rebuilt by its next step
        assert moved.cache is None and moved.lm is tiny
        moved.run(24)
        session.run(24)
        assert session.output_ids == reference.output_ids == moved.output_ids, method
        assert isinstance(moved.cache, StaticKV)
    # two sessions over the same tokens: the second copies the static entries the first rebuilt (engine.rebuilt_prefixes)
    first, second = (Session(tiny, "ar").start(prompt) for _ in range(2))
    first.run(8)
    second.run(8)
    first, second = state_pickle.loads(state_pickle.dumps((first, second)))
    first.run(16)
    second.ensure_cache()
    assert second.rebuild_copied == len(second.context) - 1 and isinstance(second.cache, StaticKV)
    second.run(16)
    assert first.output_ids == second.output_ids == reference.output_ids[:16]
    shared_resources.forget("test-static-model")
    shared_resources.forget("test-static-head")
    assert runner.describe().startswith("static cache, uncaptured (padded")
    assert runner._working is not None  # the levels ran on the static buffer
