"""KV cache compaction: after verification only the committed prefix and the accepted path stay."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from specviz.runtime.static_kv import StaticKV


def cache_length(cache) -> int:
    return int(cache.get_seq_length()) if cache is not None else 0


@torch.inference_mode()
def keep_accepted(cache, past_len: int, kept_block_positions: list[int]) -> None:
    """The verify forward appended a block of q tree nodes after past_len entries. Keep, in order, the
    block positions listed (the root and the accepted nodes) and drop the rest of the block."""
    if isinstance(cache, StaticKV):  # one gather for all layers, on the device
        cache.keep(past_len, kept_block_positions)
        return
    keep = len(kept_block_positions)
    if kept_block_positions != list(range(keep)):
        # the accepted path is scattered through the block: move its entries to the front of the block
        source = torch.tensor(kept_block_positions, dtype=torch.long) + past_len
        for layer in cache.layers:
            index = source.to(layer.keys.device)
            layer.keys[:, :, past_len:past_len + keep] = layer.keys.index_select(-2, index)
            layer.values[:, :, past_len:past_len + keep] = layer.values.index_select(-2, index)
            if isinstance(layer, GrowingLayer):
                layer.transposed_length = min(layer.transposed_length, past_len)
    # when the path already sits at the front of the block (chains, first-child paths) no copy is needed
    surplus = cache_length(cache) - (past_len + keep)
    if surplus > 0:
        cache.crop(-surplus)


class GrowingLayer(DynamicLayer):
    """A DynamicLayer that appends into a preallocated buffer (capacity doubles when full) instead of
    torch.cat-ing the whole cache on every forward: at a 512-token cache the copies took 6 ms of a 32 ms
    one-token forward and 20 ms of a 52 ms 16-token one. `keys` / `values` are views of the filled part,
    so crop is a length change and keep_accepted writes into the buffer in place.

    For runtime.native.decoder_kernel it also keeps the keys transposed into the attention's 16-key tiles
    (`transposed`, the buffer's shape; None until that kernel runs): the first `transposed_length` keys are
    there as they are in the cache, so a forward transposes only the rest. Whatever rewrites or drops cache
    entries lowers it (crop, keep_accepted, a new buffer)."""

    def __init__(self):
        super().__init__()
        self._keys = self._values = None
        self.length = 0
        self.transposed, self.transposed_length = None, 0
        self.planned = 0   # entries the first buffer makes room for (plan_length: a prompt's whole prefill)

    @property
    def keys(self):
        return None if self._keys is None else self._keys[..., :self.length, :]

    @keys.setter
    def keys(self, tensor):  # DynamicLayer's own methods assign whole tensors (reset, batch ops)
        self._keys = tensor
        self.length = 0 if tensor is None or tensor.dim() < 2 else tensor.shape[-2]
        self.transposed, self.transposed_length = None, 0

    @property
    def values(self):
        return None if self._values is None else self._values[..., :self.length, :]

    @values.setter
    def values(self, tensor):
        self._values = tensor

    def reserve(self, new_length: int, keys_like: torch.Tensor, values_like: torch.Tensor) -> None:
        """Room for new_length entries (a new buffer when full: room_for(new_length), at least the planned
        length); keys_like, values_like: (batch, kv_heads, any, head_dim) tensors of the entries' shape and dtype."""
        if self._keys is None or self._keys.dim() < 4 or new_length > self._keys.shape[-2]:
            capacity = max(self.planned, room_for(new_length))
            keys = keys_like.new_empty((*keys_like.shape[:-2], capacity, keys_like.shape[-1]))
            values = values_like.new_empty((*values_like.shape[:-2], capacity, values_like.shape[-1]))
            if self.length:
                keys[..., :self.length, :] = self._keys[..., :self.length, :]
                values[..., :self.length, :] = self._values[..., :self.length, :]
            self._keys, self._values = keys, values
            self.transposed, self.transposed_length = None, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new_length = self.length + key_states.shape[-2]
        self.reserve(new_length, key_states, value_states)
        self._keys[..., self.length:new_length, :] = key_states
        self._values[..., self.length:new_length, :] = value_states
        self.length = new_length
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def __getstate__(self):
        """Pickled (a session's state carried to another process): the filled entries only, not the buffer's spare
        capacity or the transposed copy (the next forward rebuilds what it needs)."""
        state = dict(self.__dict__)
        if self._keys is not None and self._keys.dim() == 4:
            state["_keys"] = self._keys[..., :self.length, :].contiguous()
            state["_values"] = self._values[..., :self.length, :].contiguous()
        state["transposed"], state["transposed_length"] = None, 0
        return state

    def __setstate__(self, state):
        state.setdefault("planned", 0)
        self.__dict__.update(state)

    def resident_bytes(self) -> int:
        """What this layer's buffers take in memory: keys and values at their capacity, and the transposed copy."""
        return sum(t.untyped_storage().nbytes() for t in (self._keys, self._values, self.transposed)
                   if t is not None and t.dim() == 4)

    def trim(self) -> None:
        """At rest: drop the transposed copy (the next forward of runtime.native.decoder_kernel transposes the
        keys again) and the buffer's spare room."""
        self.transposed, self.transposed_length = None, 0
        if self._keys is not None and self._keys.dim() == 4 and self._keys.shape[-2] > self.length:
            self._keys = self._keys[..., :self.length, :].clone()  # the next step's first append makes room again
            self._values = self._values[..., :self.length, :].clone()
        self.planned = 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of tokens to remove")
        if self.is_initialized:
            self.length = max(0, self.length + tokens_to_remove)
            self.transposed_length = min(self.transposed_length, self.length)


def room_for(entries: int) -> int:
    """A new buffer's entries for `entries` filled: a spare eighth (at least 256, at most 512) for the steps after,
    a multiple of 16. Doubling left up to half of a long prompt's cache unused (issue 73); a buffer that fills up
    is copied once into a new one, a few ms at the longest prompt."""
    return -(-(entries + min(512, max(256, entries // 8))) // 16) * 16


def plan_length(cache, entries: int) -> None:
    """The cache is about to be filled with `entries` (a prompt's prefill, in chunks): its layers' first buffers
    make room for all of them at once instead of growing chunk by chunk."""
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, GrowingLayer) and layer.length == 0:
            layer.planned = room_for(entries)


def resident_bytes(cache) -> int:
    """The bytes a cache's tensors take in memory (their storage, spare room included); 0 for None."""
    if cache is None:
        return 0
    if isinstance(cache, StaticKV):  # while resident it is its verifier's working buffer, which no session owns
        buffer, working = cache.buffer, getattr(cache.owner, "_working", None)
        return 0 if buffer is None or buffer is working else buffer.untyped_storage().nbytes()
    total = 0
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, GrowingLayer):
            total += layer.resident_bytes()
        else:
            total += sum(t.untyped_storage().nbytes() for t in (getattr(layer, "keys", None),
                                                                getattr(layer, "values", None))
                         if isinstance(t, torch.Tensor) and t.dim() == 4)
    return total


def trim(cache) -> None:
    """A cache at rest gives back what only a running forward needs (GrowingLayer.trim); others keep theirs."""
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, GrowingLayer):
            layer.trim()


def new_cache(config) -> DynamicCache:
    """transformers' DynamicCache for this model with every plain full-attention layer a GrowingLayer
    (sliding-window and other special layers stay as transformers made them)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


@torch.inference_mode()
def copy_prefix(source, target, entries: int) -> bool:
    """Write the first `entries` entries of cache source into the empty cache target (same model, same kind of cache);
    False, writing nothing, where a layer is not one this can copy (sliding-window layers and the like)."""
    if isinstance(source, StaticKV) and isinstance(target, StaticKV):
        filled = source.filled()
        target.owner, target.buffer, target.length = None, filled[:, :, :, :entries].clone(), entries  # adopted on use
        return True
    if isinstance(source, StaticKV) or isinstance(target, StaticKV) or len(source.layers) != len(target.layers):
        return False
    if not all(isinstance(layer, GrowingLayer) and layer.is_initialized for layer in source.layers) \
            or not all(isinstance(layer, GrowingLayer) for layer in target.layers):
        return False
    for mine, theirs in zip(target.layers, source.layers):
        mine.update(theirs.keys[..., :entries, :].clone(), theirs.values[..., :entries, :].clone())
    return True
