"""The native pass over the verify logits (runtime.native.logit_kernel) against torch, and its fall-back."""

import shutil

import numpy as np
import pytest
import torch
from conftest import native_library_or_skip

from specviz.accept.verification import TOP_K, LogitTop, _node_ranks_torch, blockwise_topk, node_target_stats
from specviz.runtime.native import build as native_build
from specviz.runtime.native import logit_kernel
from specviz.tree.draft_tree import DraftTree

VOCAB = 128 * 64


def awkward_logits(rows: int, seed: int) -> torch.Tensor:
    """Random rows plus the shapes that break a careless top-k or logsumexp."""
    logits = torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 5
    logits[1, 4000] = 90.0                           # one logit dominates its row
    logits[2] = -30.0                                # a flat row: every value ties
    logits[3, [9, 700, 5000]] = 40.0                 # the best value three times, in three blocks
    logits[4] = torch.arange(VOCAB, dtype=torch.float32) / 100  # the top-k all in the last block
    logits[5, 100:130] = 25.0                        # 30 equal values straddling a block edge (k = 16)
    return logits


@pytest.fixture
def native():
    return native_library_or_skip(logit_kernel, "native kernel")


def test_the_kernel_builds_where_a_compiler_is_found():
    if not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("no C++ compiler on this machine")
    assert logit_kernel.status() == "native"


def test_native_top_k_and_normalisers_equal_torch(native):
    logits = awkward_logits(9, seed=0)
    values, ids, norms = (torch.from_numpy(array) for array in logit_kernel.summarise(native, logits, TOP_K))
    expected_values = logits.topk(TOP_K, dim=-1).values
    assert torch.equal(values, expected_values)
    # equal values come lowest id first, so the argmax is torch's (its first largest)
    assert torch.equal(ids[:, 0], logits.argmax(-1))
    assert ids[2].tolist() == list(range(TOP_K)) and ids[5].tolist() == list(range(100, 100 + TOP_K))
    assert ids[3, :3].tolist() == [9, 700, 5000]
    assert torch.equal(logits.gather(1, ids), values)
    rows_without_ties = [0, 1, 4, 6, 7, 8]
    assert torch.equal(ids[rows_without_ties], blockwise_topk(logits, TOP_K, 128)[1][rows_without_ties])
    exact = torch.logsumexp(logits.double(), dim=-1)
    assert (norms.double() - exact).abs().max() < 2e-5


def test_native_node_ranks_equal_the_torch_path(native):
    logits = awkward_logits(12, seed=1)
    tree = DraftTree(0)
    rng = np.random.default_rng(2)
    while len(tree) < 12:
        parent = int(rng.integers(len(tree)))
        row = logits[parent]
        # half the tokens from the parent's top-k, half from anywhere (ranks counted over the whole row)
        token = int(row.topk(TOP_K).indices[rng.integers(TOP_K)]) if rng.random() < 0.5 else int(rng.integers(VOCAB))
        tree.add(parent, token, "logits")
    assert len(tree) == 12
    top = LogitTop.of(logits, tree)
    assert top.tree is tree
    plain = LogitTop.of(logits)
    expected_logits, expected_ranks = _node_ranks_torch(tree, logits, plain)
    assert np.array_equal(top.token_ranks[1:], expected_ranks)
    assert np.array_equal(top.token_logits[1:], expected_logits)
    outside = expected_ranks >= TOP_K
    assert outside.any() and (~outside).any()
    probs, ranks, _ = node_target_stats(tree, logits, top)
    by_torch = torch.softmax(logits.double(), -1)[tree.parents[1:], tree.tokens[1:]].numpy()
    assert np.allclose(probs[1:], by_torch, rtol=1e-4, atol=1e-9)


def test_native_results_do_not_depend_on_the_thread_count_or_tree_size(native, monkeypatch):
    logits = awkward_logits(11, seed=5)
    tree = DraftTree(0)
    for node in range(1, 11):
        tree.add(node // 2, int(logits[node // 2].topk(3).indices[node % 3]) if node % 2 else node * 31, "logits")
    results = []
    for threads in (1, 2, 3):  # each thread summarises a run of rows and prefetches the next one in its run
        monkeypatch.setattr(logit_kernel.torch, "get_num_threads", lambda threads=threads: threads)
        results.append(logit_kernel.summarise(native, logits, TOP_K, tree.parents[1:], tree.tokens[1:], entropies=True))
    for other in results[1:]:
        assert all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) for a, b in zip(results[0], other))
    assert results[0][4][0] == -1 and (results[0][4][1:] >= 0).all()
    # a root-only tree (every `ar` step): no node to rank, the root's rank is -1
    values, ids, norms, token_logits, ranks, probs, _ = logit_kernel.summarise(native, logits[:1], TOP_K, [], [])
    assert ranks.tolist() == [-1] and len(token_logits) == 1 and np.isnan(probs).all()
    assert np.array_equal(values, results[0][0][:1]) and np.array_equal(norms, results[0][2][:1])


def test_native_rejects_nodes_outside_the_logits(native):
    logits = awkward_logits(6, seed=3)[:3].contiguous()
    with pytest.raises(ValueError):
        logit_kernel.summarise(native, logits, TOP_K, [0, 0], [5, VOCAB])
    with pytest.raises(ValueError):
        logit_kernel.summarise(native, logits, TOP_K, [0, 3], [5, 6])


def test_without_a_working_compiler_the_torch_path_gives_the_same_verification(tmp_path, monkeypatch):
    logits = awkward_logits(9, seed=4)
    tree = DraftTree(0)
    for parent, token in [(0, 7), (0, int(logits[0].argmax())), (1, 3), (2, int(logits[2].argmax()))]:
        tree.add(parent, token, "logits")
    logits = logits[:len(tree)].contiguous()
    wanted = LogitTop.of(logits, tree), node_target_stats(tree, logits, LogitTop.of(logits, tree))
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", shutil.which("false") or "/bin/false")  # a "compiler" that always fails
    monkeypatch.setattr(native_build.shutil, "which", lambda name: name if name.endswith("false") else None)
    logit_kernel.reset()
    try:
        assert logit_kernel.library() is None and logit_kernel.status().startswith("torch (")
        top = LogitTop.of(logits, tree)
        assert top.tree is None  # the torch path ranks the nodes in node_target_stats instead
        probs, ranks, norms = node_target_stats(tree, logits, top)
        assert torch.equal(top.values, wanted[0].values)
        # equal values lowest id first here too, but which of more than k of them make the cut is torch's:
        # the flat row (8,192 equal values) may start anywhere
        flat = 2
        assert [a for i, a in enumerate(top.argmax) if i != flat] == \
            [a for i, a in enumerate(wanted[0].argmax) if i != flat] == \
            [a for i, a in enumerate(logits.argmax(-1).tolist()) if i != flat]
        assert np.array_equal(ranks, wanted[1][1]) and np.allclose(probs[1:], wanted[1][0][1:], rtol=1e-5)
        monkeypatch.setenv("SPECVIZ_NATIVE", "0")
        logit_kernel.reset()
        assert logit_kernel.status() == "torch (turned off (SPECVIZ_NATIVE=0))"
    finally:
        logit_kernel.reset()


def test_native_entropies_equal_torch_where_asked(native):
    from specviz.drafters.entropy_trigger import entropies

    logits = awkward_logits(8, seed=6)
    logits[6, :100] = float("-inf")                  # tokens the model rules out: p log p = 0, not nan
    logits[7] = torch.linspace(-5, 5, VOCAB)
    tree = DraftTree(0)
    for node in range(1, 8):
        tree.add(node - 1, node * 13, "logits")
    plain = LogitTop.of(logits, tree)
    top = LogitTop.of(logits, tree, entropies=True)
    assert plain.entropies is None and top.entropies.shape == (8,)
    finite = [r for r in range(8) if r != 6]
    assert np.allclose(top.entropies[finite], np.asarray(entropies(logits))[finite], rtol=1e-5, atol=1e-5)
    # torch's p log p gives nan for a -inf logit; the pass gives the entropy over the tokens left
    assert top.entropies[6] == pytest.approx(entropies(logits[6:7, 100:])[0], rel=1e-5)
    assert top.entropies[2] == pytest.approx(np.log(VOCAB), abs=1e-4) and abs(top.entropies[1]) < 1e-5
    # the entropy comes from the same pass: everything else is bitwise what the pass without it gives
    assert np.array_equal(top.values_np, plain.values_np) and np.array_equal(top.ids_np, plain.ids_np)
    assert np.array_equal(top.log_norms_np, plain.log_norms_np) and np.array_equal(top.token_ranks, plain.token_ranks)
