"""The native tree attention (runtime/native/attention_kernel.cc): ATen's numbers, rows independent of the tree
around them, and ATen's path wherever it cannot run."""

import pytest
import torch
from conftest import native_library_or_skip, tree_logits_native_and_not

from specviz.runtime.native import attention_kernel


@pytest.fixture
def kernel():
    return native_library_or_skip(attention_kernel, "native attention")


def _case(n, past, kv_heads, groups, head_dim, seed, spare=9):
    """Packed queries, keys and values as views of a larger buffer (like the cache's), a tree mask."""
    generator = torch.Generator().manual_seed(seed)
    # q as the forward holds it: a view of the rotated q/k heads, (1, n, heads, d) with k's heads after q's
    q = torch.randn(1, n, kv_heads * (groups + 1), head_dim, generator=generator)[:, :, :kv_heads * groups]
    buffer = torch.randn(2, 1, kv_heads, past + n + spare, head_dim, generator=generator)
    keys, values = buffer[0, :, :, :past + n], buffer[1, :, :, :past + n]
    mask = torch.zeros(n, past + n)
    tree = torch.full((n, n), float("-inf"))
    parents = [None] + [int(torch.randint(0, i, (1,), generator=generator)) for i in range(1, n)]
    for node in range(n):  # each node sees itself and its ancestors
        at = node
        while at is not None:
            tree[node, at] = 0.0
            at = parents[at]
    mask[:, past:] = tree
    return q, keys, values, mask


@pytest.mark.parametrize("n, past, kv_heads, groups, head_dim", [
    (1, 40, 3, 3, 64), (5, 17, 2, 1, 64), (16, 512, 3, 3, 64), (70, 100, 1, 4, 128), (3, 0, 2, 2, 128),
    (4, 1500, 3, 3, 64)])  # the last: transposed keys past what a thread keeps between calls
def test_the_kernel_computes_atens_attention(kernel, n, past, kv_heads, groups, head_dim):
    q, keys, values, mask = _case(n, past, kv_heads, groups, head_dim, seed=n + past)
    scale = head_dim ** -0.5
    got = attention_kernel.attend(kernel, q, keys, values, mask, scale)
    assert torch.allclose(got, attention_kernel.reference(q, keys, values, mask, scale), atol=2e-6, rtol=1e-5)


def test_a_rows_result_does_not_depend_on_the_tree_around_it(kernel):
    """A node sees the cache and its ancestors: the same numbers (bitwise) wherever those sit in the tree
    and however many other rows share the call, as when one-token decoding computes that row."""
    past, d = 45, 64
    q, keys, values, mask = _case(12, past, 2, 3, d, seed=3)
    full = attention_kernel.attend(kernel, q, keys, values, mask, 0.125)
    for node in (0, 7, 11):
        seen = [j for j in range(past + 12) if mask[node, j] == 0]  # the cache, then the path in order
        alone_k, alone_v = keys[:, :, seen].contiguous(), values[:, :, seen].contiguous()
        alone = attention_kernel.attend(kernel, q[:, node:node + 1], alone_k, alone_v, torch.zeros(1, len(seen)),
                                        0.125)
        assert torch.equal(alone, full[:, node:node + 1])


def test_a_one_token_steps_row_is_the_root_row_of_every_tree_after_any_context(kernel):
    """The row ar computes alone (one token, its 9 query heads over 3 key/value heads) against the same row as the
    root of a chain of 2 to 8 tokens, after every context length from 1 to 139, with the engine's own masks
    (finfo.min, not -inf): bitwise. Before the kernels were built with -ffp-contract=off, GCC fused multiply-adds
    in the copy of the loops made for one-row blocks and not in the two-row copy, and a third of these differed
    on AVX2 (the default model's SmolLM2 shape: a first query head alone in a block of one)."""
    generator = torch.Generator().manual_seed(0)
    parted = []
    for past in range(1, 140):
        for n in (2, 3, 4, 5, 8):
            q = torch.randn(1, n, 9, 64, generator=generator)
            keys, values = torch.randn(2, 1, 3, past + n, 64, generator=generator)
            mask = torch.zeros(n, past + n)
            mask[:, past:] = torch.triu(torch.full((n, n), torch.finfo(torch.float32).min), 1)
            tree = attention_kernel.attend(kernel, q, keys, values, mask, 0.125)
            one = attention_kernel.attend(kernel, q[:, :1].contiguous(), keys[:, :, :past + 1].contiguous(),
                                          values[:, :, :past + 1].contiguous(), mask[:1, :past + 1].contiguous(),
                                          0.125)
            if not torch.equal(one[0, 0], tree[0, 0]):
                parted.append((past, n))
    assert not parted, parted[:10]


def test_shapes_it_does_not_take_are_refused_or_left_to_aten(kernel):
    q, keys, values, mask = _case(4, 10, 2, 2, 64, seed=1)
    with pytest.raises(ValueError):
        attention_kernel.attend(kernel, q, keys.transpose(2, 3), values, mask, 0.125)
    with pytest.raises(ValueError):
        attention_kernel.attend(kernel, q, keys, values, mask[:, :-1], 0.125)
    assert attention_kernel.usable(torch.float32, torch.device("cpu"), 96) is None
    assert attention_kernel.usable(torch.bfloat16, torch.device("cpu"), 64) is None
    assert attention_kernel.usable(torch.float32, torch.device("cpu"), 64) is kernel


def test_the_lean_forward_gives_atens_logits_with_or_without_the_kernel(lm, kernel):
    on, off = tree_logits_native_and_not(lm, "native_attention", "A tree of drafts is verified in one forward pass")
    assert torch.allclose(on, off, atol=2e-4, rtol=1e-4)
    assert torch.equal(on.argmax(-1), off.argmax(-1))
