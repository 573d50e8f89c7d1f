"""A KV cache of fixed capacity: the captured verify forward (runtime.captured_forward) reads and writes one
working buffer at fixed addresses, so one CUDA graph per tree size serves every step of every session.

Every layer's keys and values live in one tensor (layers, 2, kv_heads, capacity, head_dim): the accepted path's
compaction is one gather and one copy for all layers, on the device. The verifier's working buffer holds one
cache at a time (the resident one); another session's cache waits in a copy of its filled entries and is copied
back in before its next forward (a few tens of MB at most, microseconds on a GPU: sessions take turns in A/B).
Entries past `length` are stale but finite (the buffer starts zeroed): a forward masks them out, and an
additive mask times a finite value is an exact zero, where a NaN would poison every row.
"""

from __future__ import annotations

import torch


class StaticKV:
    def __init__(self, owner=None, buffer: torch.Tensor | None = None, length: int = 0):
        """owner: the runtime.captured_forward.CapturedVerifier whose working buffer this cache uses (None: not
        yet adopted, e.g. restored from a pickle); buffer: the working buffer while resident, else a copy of the
        filled entries (layers, 2, kv_heads, length, head_dim), or None while empty."""
        self.owner, self.buffer, self.length = owner, buffer, length

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """DynamicCache's spelling: a negative count of entries to drop from the end."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of tokens to remove")
        self.length = max(0, self.length + tokens_to_remove)

    @torch.inference_mode()
    def keep(self, past_len: int, kept_block_positions: list[int]) -> None:
        """After a verify forward appended a block of entries at past_len: keep, in order, the block positions
        listed (the root and the accepted nodes) and drop the rest (runtime.kv.keep_accepted's contract)."""
        keep = len(kept_block_positions)
        if kept_block_positions != list(range(keep)):
            buffer = self.owner.resident_buffer(self) if self.owner is not None else self.buffer
            source = torch.tensor(kept_block_positions, dtype=torch.long).add_(past_len).to(buffer.device)
            buffer[:, :, :, past_len:past_len + keep] = buffer.index_select(3, source)
        self.length = past_len + keep

    def filled(self) -> torch.Tensor | None:
        """The filled entries (layers, 2, kv_heads, length, head_dim), a view (None while empty)."""
        return None if self.buffer is None or not self.length else self.buffer[:, :, :, :self.length]

    def __getstate__(self):
        """Pickled (a session's state carried to another process): the filled entries on the CPU; the graphs
        stay with the process that captured them (a restored cache is adopted by that process's verifier)."""
        filled = self.filled()
        return {"buffer": None if filled is None else filled.cpu(), "length": self.length}

    def __setstate__(self, state):
        self.owner, self.buffer, self.length = None, state["buffer"], state["length"]
