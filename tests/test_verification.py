"""Verification: the tree forward equals per-path forwards, KV compaction equals a fresh prefill, greedy
and sampled acceptance, and the shared top-k and log-normalisers of the logits pass."""

import numpy as np
import torch
from transformers import DynamicCache

from specviz.accept.greedy import greedy_accept
from specviz.accept.sampling import SamplingSettings, sampling_accept
from specviz.accept.verification import TOP_K, LogitTop
from specviz.engine.tree_forward import tree_forward
from specviz.runtime.kv import keep_accepted
from specviz.tree.draft_tree import DraftTree


def prefill(lm, ids):
    cache = DynamicCache(config=lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


def full_logits(lm, ids):
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([ids])).logits[0].float()


def test_tree_forward_equals_per_path_forwards(lm, prefix_ids):
    past = prefix_ids[:-1]
    cache = prefill(lm, past)
    tree = DraftTree(prefix_ids[-1])
    a = tree.add_path([5461, 30, 378, 4096], "retrieval")
    tree.add_path([1100, 200], "logits", parent=a[1])
    tree.add_path([600, 700, 800], "model")
    tree.add_path([42], "logits", parent=a[0])
    logits = tree_forward(lm, cache, tree, len(past))
    assert cache.get_seq_length() == len(past) + len(tree)
    for path in tree.paths():
        sequential = full_logits(lm, past + [tree.tokens[n] for n in path])[len(past):]
        assert torch.allclose(sequential, logits[path], atol=1e-3, rtol=0), path
        assert torch.equal(sequential.argmax(-1), logits[path].argmax(-1))


def test_keep_accepted_equals_fresh_prefill(lm, prefix_ids):
    past = prefix_ids[:-1]
    cache = prefill(lm, past)
    tree = DraftTree(prefix_ids[-1])
    tree.add_path([100, 200, 300], "retrieval")
    scattered = tree.add_path([600, 700, 800], "model")  # not at the front of the block: needs a gather
    tree_forward(lm, cache, tree, len(past))
    keep_accepted(cache, len(past), [0] + scattered[:2])
    fresh = prefill(lm, past + [prefix_ids[-1], 600, 700])
    assert cache.get_seq_length() == fresh.get_seq_length()
    for mine, theirs in zip(cache.layers, fresh.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-4)
        assert torch.allclose(mine.values, theirs.values, atol=1e-4)


def test_keep_accepted_front_path_just_crops(lm, prefix_ids):
    past = prefix_ids[:-1]
    cache = prefill(lm, past)
    tree = DraftTree(prefix_ids[-1])
    chain = tree.add_path([100, 200, 300], "retrieval")
    tree.add_path([600], "model")
    tree_forward(lm, cache, tree, len(past))
    keep_accepted(cache, len(past), [0] + chain[:1])
    fresh = prefill(lm, past + [prefix_ids[-1], 100])
    for mine, theirs in zip(cache.layers, fresh.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-4)


def synthetic_logits(tree, argmax_by_node, vocab=10):
    logits = torch.zeros((len(tree), vocab))
    for node, token in argmax_by_node.items():
        logits[node, token] = 5.0
    return logits


def test_greedy_accept_statuses_and_bonus():
    tree = DraftTree(0)
    a = tree.add_path([1, 2, 3], "retrieval")
    b = tree.add_path([4], "logits", parent=a[0])
    c = tree.add_path([5, 6], "model")
    # target: after root 1, after 1 -> 2, after 2 -> 9 (3 is wrong)
    logits = synthetic_logits(tree, {0: 1, a[0]: 2, a[1]: 9, a[2]: 0, b[0]: 0, c[0]: 0, c[1]: 0})
    v = greedy_accept(tree, logits)
    assert v.path == a[:2]
    assert v.accepted_tokens == [1, 2, 9]
    assert v.statuses[a[2]] == "rejected" and v.statuses[b[0]] == "rejected" and v.statuses[c[0]] == "rejected"
    assert v.statuses[c[1]] == "unreached"
    assert v.target_ranks[a[0]] == 0 and v.target_ranks[a[2]] > 0
    assert np.isclose(v.target_probs[a[0]], torch.softmax(logits[0], -1)[1].item())


def test_sampling_accept_keeps_target_distribution():
    """Whatever the drafts, the first committed token follows the target's distribution."""
    tree = DraftTree(0)
    tree.add_path([1], "retrieval")
    tree.add_path([2], "logits")
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25] * 4, [0.25] * 4]))
    generator = torch.Generator().manual_seed(0)
    counts = np.zeros(4)
    trials = 4000
    for _ in range(trials):
        counts[sampling_accept(tree, logits, SamplingSettings(1.0), generator).accepted_tokens[0]] += 1
    assert np.allclose(counts / trials, [0.1, 0.2, 0.3, 0.4], atol=0.03)


def test_blockwise_topk_equals_torch_topk():
    from specviz.accept.verification import blockwise_topk

    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(65, 128 * 64, generator=generator) * 4
    logits[3, 5000] = 50.0                      # one row's best far above the rest
    logits[7, :] = torch.arange(128 * 64, dtype=torch.float32)  # the top-k all in the last block
    values, ids = blockwise_topk(logits, 16, 128)
    expected_values, expected_ids = logits.topk(16, dim=-1)
    assert torch.equal(values, expected_values) and torch.equal(ids, expected_ids)


def test_log_normalisers_agree_with_logsumexp():
    from specviz.accept.verification import LogitTop, log_normalisers

    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(17, 128 * 64, generator=generator) * 6
    logits[2, 11] = 80.0                        # a row that one logit dominates
    logits[5] = -30.0                           # a flat row
    top = LogitTop.of(logits)
    norms = log_normalisers(logits, top.values, top.ids)
    assert torch.allclose(norms, torch.logsumexp(logits, dim=-1), atol=2e-5, rtol=0)


# ---- shared top-k --------------------------------------------------------------------------------------
def test_shared_top_k_gives_exact_ranks_inside_and_outside_it():
    torch.manual_seed(0)
    tree = DraftTree(0)
    a = tree.add(0, 3, "logits")
    tree.add(0, 40, "logits")
    tree.add(a, 7, "retrieval")
    logits = torch.randn(len(tree), 100)
    logits[0, 3] = 10.0  # node a is the argmax under the root
    verification = greedy_accept(tree, logits)
    assert verification.top.values.shape == (len(tree), TOP_K)
    for node in range(1, len(tree)):
        row = logits[tree.parents[node]]
        assert verification.target_ranks[node] == int((row > row[tree.tokens[node]]).sum())
    assert LogitTop.of(logits).argmax == logits.argmax(-1).tolist()
