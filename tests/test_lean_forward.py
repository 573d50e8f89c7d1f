"""The lean forward: installed on Llama-shaped models with the same numbers as transformers' forward,
packed oneDNN weights (and dense ones when memory is short), the stock forward when asked."""

import pytest
import torch

from specviz.engine.session import Session
from specviz.engine.tree_forward import tree_forward
from specviz.runtime.kv import new_cache
from specviz.runtime.loading import load_model
from specviz.tree.draft_tree import DraftTree


# ---- lean forward ------------------------------------------------------------------------------------
def _tree(root):
    tree = DraftTree(root)
    a = tree.add_path([5, 6, 7], "retrieval")
    tree.add_path([8, 9], "logits", parent=a[0])
    tree.add_path([10], "model")
    return tree


@torch.inference_mode()
def _stock_path_logits(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0].float()


def test_lean_forward_is_installed_and_matches_stock_on_grouped_heads(tiny_models):
    lm = load_model(tiny_models["same"])  # 4 query heads over 2 key/value heads
    assert lm.lean and lm.decoder is not None
    past = [11, 12, 13, 14, 15]
    cache = new_cache(lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([past]), past_key_values=cache, use_cache=True)
    tree = _tree(16)
    logits = tree_forward(lm, cache, tree, len(past))
    assert cache.get_seq_length() == len(past) + len(tree)
    for path in tree.paths():
        stock = _stock_path_logits(lm.model, past + [tree.tokens[n] for n in path])[len(past):]
        assert torch.allclose(stock, logits[path], atol=1e-5, rtol=0), path


def test_packed_onednn_weights_give_a_row_the_same_result_whatever_the_row_count(lm):
    """oneDNN runs every linear module from a packed copy of its weight (the stock path keeps the dense
    one; with the native kernel the modules still run the prefill), and a row's output does not depend on
    how many rows share the call."""
    from specviz.runtime import fast_linear

    if lm.linear not in ("native", "onednn"):
        pytest.skip(f"this machine runs the {lm.linear} linear kernel")
    linears = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m._specviz_packed.is_mkldnn for m in linears)
    head = lm.model.lm_head
    x = torch.randn(1, 65, head.in_features, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        one_row = head(x[:, :1])
        for rows in (2, 16, 65):
            assert torch.equal(head(x[:, :rows])[:, :1], one_row)
        with fast_linear.stock():
            assert torch.equal(head(x), torch.nn.functional.linear(x, head.weight))
        assert torch.allclose(head(x), torch.nn.functional.linear(x, head.weight), atol=1e-4, rtol=0)


def test_too_little_memory_to_pack_runs_dense_onednn_and_says_so(tiny_models, monkeypatch):
    from specviz.runtime import fast_linear

    monkeypatch.setattr(fast_linear, "_available_memory_bytes", lambda: 1024)
    lm = load_model(tiny_models["same"], linear="onednn")
    if lm.linear != "onednn":
        pytest.skip(f"this machine runs the {lm.linear} linear kernel")
    assert not lm.packed and any("dense weights" in note for note in lm.notes)
    assert not any(hasattr(m, "_specviz_packed") for m in lm.model.modules())
    session = Session(lm, "racer", budget=4).start("Count: one two three one two three")
    session.run(6)
    assert len(session.output_ids) == 6


def test_stock_forward_when_asked(tiny_models, monkeypatch):
    monkeypatch.setenv("SPECVIZ_FORWARD", "stock")
    lm = load_model(tiny_models["same"])
    assert not lm.lean and lm.decoder is None
