"""The lean forward in one native call (runtime/native/decoder_kernel.cc): bitwise the per-call forward's logits and
cache, the transposed keys it keeps right across compaction and crops, and the per-call forward wherever
it cannot run."""

import pytest
import torch
from conftest import native_library_or_skip

from specviz.engine.tree_forward import tree_forward
from specviz.runtime.kv import keep_accepted, new_cache
from specviz.runtime.native import decoder_kernel
from specviz.tree.draft_tree import DraftTree


@pytest.fixture
def kernel(lm):
    native_library_or_skip(decoder_kernel, "native decoder kernel")
    if lm.decoder.native_decoder() is None:
        pytest.skip(f"the default model does not run the native decoder here (linear={lm.linear})")


def _prefilled(lm, ids):
    cache = new_cache(lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


def _tree(root: int, paths: list[list[int]]) -> DraftTree:
    tree = DraftTree(root)
    for path in paths:
        tree.add_path(path, "retrieval")
    return tree


def _steps(lm, native: bool, ids, steps):
    """Runs trees one after another as the engine does (forward, keep the accepted block positions);
    returns every step's logits and the cache."""
    decoder = lm.decoder
    decoder.native_layers = native
    try:
        cache = _prefilled(lm, ids[:-1])
        past, logits = len(ids) - 1, []
        for tree, kept in steps:
            logits.append(tree_forward(lm, cache, tree, past))
            keep_accepted(cache, past, kept)
            past += len(kept)
        return logits, cache
    finally:
        decoder.native_layers = True


def test_logits_and_cache_are_bitwise_the_per_call_forwards(lm, kernel):
    """Trees of 1, 7 and 20 nodes, one after another; the kept paths are scattered through the block (the
    cache entries move, so the transposed keys must be redone from there) or at its front."""
    ids = lm.tokenizer("One native call runs every layer of the verify forward.", return_tensors="pt").input_ids[0].tolist()
    steps = [(_tree(ids[-1], []), [0]),
             (_tree(5, [[11, 12, 13], [14, 15], [16, 17]]), [0, 4, 5]),  # root, then the second branch
             (_tree(7, [[21, 22, 23, 24, 25, 26, 27, 28, 29, 30], [31, 32, 33, 34, 35, 36, 37, 38, 39]]), [0, 1, 2]),
             (_tree(9, [[41]]), [0])]
    native_logits, native_cache = _steps(lm, True, ids, steps)
    call_logits, call_cache = _steps(lm, False, ids, steps)
    for got, want in zip(native_logits, call_logits):
        assert torch.equal(got, want)
    for got, want in zip(native_cache.layers, call_cache.layers):
        assert got.length == want.length
        assert torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)
    # it ran: the native forward keeps transposed keys, the per-call forward none
    assert all(layer.transposed is not None for layer in native_cache.layers)
    assert all(layer.transposed is None for layer in call_cache.layers)


def test_a_cropped_cache_transposes_the_keys_that_replace_the_dropped_ones(lm, kernel):
    ids = lm.tokenizer("Crop, then verify again from the same place.", return_tensors="pt").input_ids[0].tolist()
    decoder = lm.decoder
    cache = _prefilled(lm, ids[:-1])
    past = len(ids) - 1
    tree_forward(lm, cache, _tree(ids[-1], [[100, 101, 102, 103, 104]]), past)
    cache.crop(-6)
    assert {layer.transposed_length for layer in cache.layers} == {past}
    again = tree_forward(lm, cache, _tree(ids[-1], [[200, 201]]), past)
    decoder.native_layers = False
    try:
        fresh = _prefilled(lm, ids[:-1])
        want = tree_forward(lm, fresh, _tree(ids[-1], [[200, 201]]), past)
    finally:
        decoder.native_layers = True
    assert torch.equal(again, want)


def test_a_growing_cache_gets_new_buffers_and_stays_right(lm, kernel):
    """A tree that overflows the cache's buffer: the keys move to a new buffer, transposed afresh."""
    ids = lm.tokenizer("Grow", return_tensors="pt").input_ids[0].tolist()
    cache = _prefilled(lm, ids[:-1])
    capacity = cache.layers[0]._keys.shape[-2]
    chain = [[1000 + i for i in range(capacity)]]
    native = tree_forward(lm, cache, _tree(ids[-1], chain), len(ids) - 1)
    assert cache.layers[0]._keys.shape[-2] > capacity and cache.layers[0]._keys.shape[-2] % 16 == 0
    decoder = lm.decoder
    decoder.native_layers = False
    try:
        want = tree_forward(lm, _prefilled(lm, ids[:-1]), _tree(ids[-1], chain), len(ids) - 1)
    finally:
        decoder.native_layers = True
    assert torch.equal(native, want)


def test_a_trimmed_cache_gives_back_its_copies_and_its_next_forward_is_the_same(lm, kernel):
    """Issue 73: a session at rest drops the transposed keys and the buffer's spare room (runtime.kv.trim); the next
    forward transposes every key again and its logits are bitwise those of an untrimmed cache."""
    from specviz.runtime.kv import resident_bytes, trim

    ids = lm.tokenizer("Trim the cache at rest, then verify again.", return_tensors="pt").input_ids[0].tolist()
    past = len(ids) - 1
    kept, trimmed = _prefilled(lm, ids[:-1]), _prefilled(lm, ids[:-1])
    for cache in (kept, trimmed):
        tree_forward(lm, cache, _tree(ids[-1], [[300, 301, 302]]), past)
        keep_accepted(cache, past, [0, 1])
    before = resident_bytes(trimmed)
    trim(trimmed)
    layer = trimmed.layers[0]
    assert layer.transposed is None and layer._keys.shape[-2] == layer.length == past + 2
    entry_bytes = 2 * layer.keys[..., :1, :].numel() * layer.keys.element_size()  # keys and values of one entry
    assert resident_bytes(trimmed) == len(trimmed.layers) * (past + 2) * entry_bytes < before / 2
    tree = _tree(ids[-1], [[400, 401], [402]])
    assert torch.equal(tree_forward(lm, trimmed, tree, past + 2), tree_forward(lm, kept, tree, past + 2))


def test_where_it_cannot_run_the_per_call_forward_does(lm, kernel):
    decoder = lm.decoder
    assert decoder_kernel.NativeDecoder.cache_ready(None, len(decoder.layers)) is False
    from transformers.cache_utils import DynamicCache

    stock = DynamicCache(config=lm.model.config)  # plain DynamicLayers: not kept by this kernel
    ids = lm.tokenizer("A stock cache", return_tensors="pt").input_ids[0].tolist()
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([ids[:-1]]), past_key_values=stock, use_cache=True)
    assert decoder_kernel.NativeDecoder.cache_ready(stock, len(decoder.layers)) is False
    want = tree_forward(lm, _prefilled(lm, ids[:-1]), _tree(ids[-1], [[5, 6]]), len(ids) - 1)
    assert torch.equal(tree_forward(lm, stock, _tree(ids[-1], [[5, 6]]), len(ids) - 1), want)
    for switch in ("native_layers", "native_glue", "native_attention"):
        setattr(decoder, switch, False)
        try:
            assert decoder.native_decoder() is None
        finally:
            setattr(decoder, switch, True)
    assert decoder.native_decoder() is not None
