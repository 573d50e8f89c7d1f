"""The draft head's levels as the target's verify forward runs on a GPU (runtime.captured_forward): a static KV
cache for the head's one layer, one CUDA graph per (bucket, span), each block padded to its bucket.

A head level is a handful of nodes through one small layer and a cut LM head: eager, its ~40 kernels are each
launched from Python (0.8 ms a level on an H200), which is what a level costs. Captured, a level is one replay. The
host sends the level's tokens, positions and cache length (one int64 vector), the parents' predicted features and
the level's visibility over the cache (built by the drafter, which knows the tree: drafters.head); padding rows see
themselves only and are written past the kept entries. The head's feed of committed positions (up to 512 rows,
drafters.head.FEED_CHUNK) runs the same code uncaptured.

It is on whenever the target's verify forward is static: captured where the target's is (CUDA), uncaptured and
padded where that is the CPU's stand-in (`--graphs static`), so the CPU tests check the same code."""

from __future__ import annotations

import torch

from specviz.runtime.masks import additive_mask
from specviz.runtime.captured_forward import BUCKETS, ForwardOps, StaticRunner, bucket_for, layer_stack, span_for
from specviz.runtime.static_kv import StaticKV

# entries past the context a proposal may add before its drafter crops them: head_depth levels (at most 16) of at most
# head_expand x head_breadth nodes (256), with a bucket's padding
DRAFT_ENTRIES = 16 * BUCKETS[-1]


class CapturedHead(StaticRunner):
    rows_are, blocks_are = "node", "head levels"

    def __init__(self, head, capture: bool, pad: bool | None = None):
        """head: a runtime.draft_head.DraftHead (its lean decoder, fc and the target's embedding)."""
        self.head, self.decoder = head, head.decoder
        shape = (len(self.decoder.layers), 2, self.decoder.kv_heads, head.lm.max_context + DRAFT_ENTRIES,
                 self.decoder.head_dim)
        super().__init__(head.lm.device, head.dtype, shape, capture, pad)
        self.ops = ForwardOps()

    @torch.inference_mode()
    def forward(self, cache: StaticKV, features: torch.Tensor, tokens: list[int], positions: list[int],
                visible: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """DraftHead.forward's contract on a static cache: n nodes reading features (n, hidden) and tokens, at
        positions, each seeing the cache entries and block rows its row of visible (n, cache + n) allows; the cache
        grows by n. Returns logits over the draft vocabulary (n, draft_vocab) and predicted features (n, hidden),
        both fp32, on the device."""
        n, past = len(tokens), cache.length
        if visible.shape != (n, past + n):
            raise ValueError(f"visible is {tuple(visible.shape)} for {n} rows after {past} entries")
        bucket = bucket_for(n) if self.pad else None
        width = bucket or n
        if past + width > self.capacity:
            raise ValueError(f"{past} cached + {width} new entries exceed the head's static cache of {self.capacity}")
        span = span_for(past + width, self.capacity)
        ints = torch.zeros(2 * width + 1, dtype=torch.long)
        ints[:n] = torch.as_tensor(tokens, dtype=torch.long)
        ints[width:width + n] = torch.as_tensor(positions, dtype=torch.long)
        ints[width + n:2 * width] = past  # a padding row's position: any will do, it sees itself only
        ints[2 * width] = past
        # the parents' predicted features stay on the device they were predicted on (no copy through the host)
        rows = torch.zeros((width, features.shape[-1]), dtype=self.dtype, device=self.device)
        rows[:n] = features.to(self.device, self.dtype)
        seen = torch.zeros((width, span), dtype=torch.bool)
        seen[:n, :past + n] = visible.cpu()
        padding = torch.arange(n, width)
        seen[padding, past + padding] = True
        with self._lock:
            buffer = self.resident_buffer(cache)
            captured = self._captured(buffer, width, span) if bucket is not None and self.capture else None
            if captured is not None:
                for target, source in zip(captured.inputs, (ints, rows, seen)):
                    target.copy_(source)
                captured.graph.replay()
                self.replays += 1
                logits, hidden = captured.outputs
            else:
                logits, hidden = self._run(buffer, ints.to(self.device), rows, seen.to(self.device), width=width,
                                           span=span)
            logits, hidden = logits[:n].clone(), hidden[:n].clone()
            cache.length = past + n
        return logits, hidden

    def _placeholders(self, bucket: int, span: int) -> tuple[torch.Tensor, ...]:
        ints = torch.zeros(2 * bucket + 1, dtype=torch.long, device=self.device)
        ints[2 * bucket] = span - bucket
        rows = torch.zeros((bucket, self.head.feature_width), dtype=self.dtype, device=self.device)
        seen = torch.zeros((bucket, span), dtype=torch.bool, device=self.device)
        own = torch.arange(bucket, device=self.device)
        seen[own, span - bucket + own] = True
        return ints, rows, seen

    def _run(self, buffer: torch.Tensor, ints: torch.Tensor, rows: torch.Tensor, seen: torch.Tensor, *, width: int,
             span: int):
        """What a graph records: fc over [embed(token); feature], the layer over the static cache, the final norm and
        the cut head."""
        tokens, positions, past = ints[:width], ints[width:2 * width][None], ints[2 * width]
        head = self.head
        x = torch.cat([head.embed(tokens[None]), rows[None]], dim=-1)
        h = head.linear(x, head.fc, None)
        slots = past + torch.arange(width, device=ints.device)
        h = layer_stack(self.decoder, buffer, h, positions, additive_mask(seen, buffer.dtype)[0, 0], slots, span,
                        self.ops)
        logits = self.decoder.linear(h, self.decoder.head, None)[0].float()
        return logits, h[0].float()
