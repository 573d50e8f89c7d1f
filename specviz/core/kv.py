"""KV cache compaction: after verification only the committed prefix and the accepted path stay."""

from __future__ import annotations

import torch


def cache_length(cache) -> int:
    return int(cache.get_seq_length()) if cache is not None else 0


@torch.inference_mode()
def keep_accepted(cache, past_len: int, kept_block_positions: list[int]) -> None:
    """The verify forward appended a block of q tree nodes after past_len entries. Keep, in order, the
    block positions listed (the root and the accepted nodes) and drop the rest of the block."""
    keep = len(kept_block_positions)
    if kept_block_positions != list(range(keep)):
        # the accepted path is scattered through the block: move its entries to the front of the block
        source = torch.tensor(kept_block_positions, dtype=torch.long) + past_len
        for layer in cache.layers:
            index = source.to(layer.keys.device)
            layer.keys[:, :, past_len:past_len + keep] = layer.keys.index_select(-2, index)
            layer.values[:, :, past_len:past_len + keep] = layer.values.index_select(-2, index)
    # when the path already sits at the front of the block (chains, first-child paths) no copy is needed
    surplus = cache_length(cache) - (past_len + keep)
    if surplus > 0:
        cache.crop(-surplus)

