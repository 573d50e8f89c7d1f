"""The lean forward's native linear layers (runtime/native/linear_kernel.cc): F.linear's numbers, a row's result
independent of the rows beside it (through the whole forward too), and a clear fall back where it cannot run."""

import pytest
import torch
import torch.nn.functional as F
from conftest import native_library_or_skip

from specviz.engine.tree_forward import tree_forward
from specviz.errors import SpecvizError
from specviz.runtime.kv import new_cache
from specviz.runtime.loading import load_model, pick_linear
from specviz.runtime.native import linear_kernel
from specviz.tree.draft_tree import DraftTree


@pytest.fixture
def kernel():
    return native_library_or_skip(linear_kernel, "native linear kernel")


@pytest.mark.parametrize("out_features, in_features, bias", [(960, 576, False), (576, 1536, True), (37, 29, True),
                                                            (1, 5, False)])
def test_linear_is_torchs_for_any_width_and_bias(kernel, out_features, in_features, bias):
    """Widths that fill whole groups and widths that end inside one (the padding is never written)."""
    generator = torch.Generator().manual_seed(out_features)
    weight = torch.randn(out_features, in_features, generator=generator) * 0.05
    b = torch.randn(out_features, generator=generator) if bias else None
    x = torch.randn(1, 19, in_features, generator=generator)
    got = linear_kernel.forward(kernel, x, linear_kernel.group(weight), b)
    assert got.shape == (1, 19, out_features)
    assert torch.allclose(got, F.linear(x, weight, b), atol=1e-4, rtol=1e-4)


def test_a_row_gets_the_same_bits_whatever_rows_share_the_call(kernel):
    """1..20 rows cover one block, blocks of unequal sizes and several blocks; on two threads and one."""
    generator = torch.Generator().manual_seed(3)
    weight = linear_kernel.group(torch.randn(200, 96, generator=generator))
    x = torch.randn(1, 20, 96, generator=generator)
    alone = torch.cat([linear_kernel.forward(kernel, x[:, i:i + 1], weight, None) for i in range(20)], dim=1)
    for rows in range(1, 21):
        assert torch.equal(linear_kernel.forward(kernel, x[:, :rows], weight, None), alone[:, :rows]), rows
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(linear_kernel.forward(kernel, x, weight, None), alone)
    finally:
        torch.set_num_threads(threads)


def test_a_trees_root_row_is_bitwise_the_one_token_forward(lm, kernel):
    """With the native linear layers (and the native attention's position-independent rows) a verify
    forward computes its root exactly as plain decoding does, whatever the tree around it."""
    if lm.linear != "native":
        pytest.skip(f"this machine runs the {lm.linear} linear kernel")
    past = lm.tokenizer("A tree's root row is the one-token step", return_tensors="pt").input_ids[0].tolist()
    cache = new_cache(lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([past[:-1]]), past_key_values=cache, use_cache=True)
    root = DraftTree(past[-1])
    one = tree_forward(lm, cache, root, len(past) - 1)
    cache.crop(-1)
    tree = DraftTree(past[-1])
    for token in (11, 12, 13):
        tree.add_path([token, token + 1, token + 2], "logits")
    many = tree_forward(lm, cache, tree, len(past) - 1)
    assert len(tree) == 10 and torch.equal(many[0], one[0])


def test_the_default_on_a_cpu_in_fp32_is_the_native_kernel(kernel):
    assert pick_linear(torch.device("cpu"), torch.float32, None) == ("native", None)
    assert pick_linear(torch.device("cpu"), torch.float32, "onednn")[0] in ("onednn", "stock")


def test_where_it_cannot_run_the_fall_back_says_why():
    kernel, note = pick_linear(torch.device("cpu"), torch.bfloat16, "native")
    assert kernel in ("onednn", "stock") and "fp32" in note
    assert linear_kernel.available(torch.device("meta"), torch.float32) is not None
    with pytest.raises(SpecvizError, match="native, onednn, stock"):
        load_model(linear="turbo")


def test_without_native_kernels_the_model_runs_onednn_and_says_nothing_wrong(tiny_models, monkeypatch):
    monkeypatch.setenv("SPECVIZ_NATIVE", "0")
    linear_kernel.reset()
    try:
        lm = load_model(tiny_models["same"])
        assert lm.linear in ("onednn", "stock") and not any("native" in note for note in lm.notes)
    finally:
        linear_kernel.reset()
