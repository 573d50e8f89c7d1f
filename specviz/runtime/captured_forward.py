"""The verify forward as a serving engine runs it: a static KV cache, the tree's mask and positions built on
the device, one CUDA graph per tree-size bucket (BUCKETS), and one device-to-host copy per step, the logits'
summary for acceptance (runtime.verify_output.DeviceSummary). A tree past the largest bucket, a prefill chunk,
a failed capture or a CPU runs the same static forward uncaptured. StaticRunner is what the draft head's
captured levels (runtime.captured_head) share with it.

Design notes: docs/design.md, "specviz/runtime/captured_forward.py".
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specviz.runtime.masks import additive_mask
from specviz.runtime.native import layer_kernel
from specviz.runtime.static_kv import StaticKV
from specviz.runtime.verify_output import DeviceSummary, VerifyOutput

BUCKETS = (1, 2, 3, 5, 9, 17, 33, 65, 129, 257)


def bucket_for(n: int) -> int | None:
    """The smallest bucket holding n rows (None: larger than every bucket)."""
    return next((b for b in BUCKETS if b >= n), None)


def span_for(entries: int, capacity: int) -> int:
    """How many cache columns a forward attends over: the smallest power of two from 256 that holds the
    cache and the block, else the whole capacity (a graph per span keeps a short context from paying for
    the longest one's columns)."""
    span = 256
    while span < entries:
        span *= 2
    return min(span, capacity)


@dataclass(frozen=True)
class ForwardOps:
    """How the static forward spells a layer (a captured forward is a chain of ~1,000 small kernels, so fewer
    and better-suited kernels are what speeds it up). The defaults are what the GPU runs measured so far."""
    fused_norm: bool = False        # torch's fused RMSNorm: one kernel instead of six
    fused_mlp: bool = False         # gate and up as one matmul (their weights become views of one matrix)
    matmul_attention: bool = False  # q k^T + mask, softmax, @ v as three kernels instead of SDPA's choice: in fp32
    # that choice is the memory-efficient kernel, which parallelises over query blocks only and took 3.75 of a
    # 1-token forward's 5.5 ms of kernel time on an H200 (30 calls: 3 query rows against 1,024 keys each)

    def label(self) -> str:
        return (f"norm {'fused' if self.fused_norm else 'chain'}, gate/up {'one matmul' if self.fused_mlp else 'two'}, "
                f"attention {'matmul' if self.matmul_attention else 'sdpa'}")


@dataclass
class Captured:
    """One bucket's graph over a working buffer: the graph, its inputs and its outputs (fixed addresses)."""
    graph: object                     # torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # what the host fills before a replay (the verifier: one int64 vector)
    outputs: tuple                    # what _run returned while recorded (the verifier: logits, features, summary)


TOP_K = 16  # the summary's top-K: accept.verification.TOP_K (a test checks they agree; the runtime cannot import it)


def ancestor_closure(parents: torch.Tensor) -> torch.Tensor:
    """(n, n) bool, [i, j] True where j is i or an ancestor of i; parents (n,) with the root (and any padding
    row) its own parent. log2(n) squarings of the one-step reach matrix: no host loop, capturable."""
    n = parents.shape[0]
    eye = torch.eye(n, dtype=torch.float32, device=parents.device)
    reach = eye.index_add(1, parents, eye)  # reach[i, parents[i]] += 1: one step up, and itself
    reach = reach.clamp_(max=1.0)
    steps = 1
    while steps < n:
        reach = (reach @ reach).clamp_(max=1.0)  # counts of paths; clamped so fp32 stays exact
        steps *= 2
    return reach > 0


def summarise(logits: torch.Tensor, parents: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(n, 2 * k + 4) fp32 for acceptance (k = TOP_K, or the vocabulary where smaller), on the logits' device:
    each row's k logits and ids best
    first (equal values lower id first, as torch.argmax and the native pass order them), its logsumexp, then
    per node its token's logit under its parent's row, its rank there (its place in that row's top-K, else the
    count of larger logits: the native pass's rule) and its row's entropy in nats. Ids travel as fp32 (exact
    below 2^24)."""
    k = min(TOP_K, logits.shape[1])
    values, ids = logits.topk(k, dim=-1)
    ids, by_id = ids.sort(dim=-1)
    values, by_value = values.gather(1, by_id).sort(dim=-1, descending=True, stable=True)
    ids = ids.gather(1, by_value)
    log_norms = torch.logsumexp(logits, dim=-1)
    rows = logits.index_select(0, parents)
    picked = rows.gather(1, tokens[:, None])                                  # (n, 1)
    larger = (rows > picked).sum(-1)
    vocab_ids = torch.arange(logits.shape[1], device=logits.device)
    tied_before = ((rows == picked) & (vocab_ids < tokens[:, None])).sum(-1)
    place = larger + tied_before
    rank = torch.where(place < k, place, larger)
    log_p = logits - log_norms[:, None]
    entropy = -(log_p.exp() * log_p).sum(-1)
    return torch.cat([values, ids.float(), log_norms[:, None], picked, rank[:, None].float(), entropy[:, None]], 1)


class StaticRunner:
    """What a captured forward needs besides its forward: one working buffer at fixed addresses that the StaticKV
    caches of every session take turns in (the resident one's entries are in it, another's wait in a copy of its
    filled entries), and one graph per (bucket, span), recorded on first use into one memory pool; a bucket whose
    capture fails runs uncaptured, with a note. Subclasses give `_run` (what a graph records) and `_placeholders`
    (inputs to record it with). capture: record CUDA graphs (CUDA only); pad: round every block up to its bucket
    even uncaptured (what the CPU tests check)."""

    rows_are, blocks_are = "token", "trees"  # what a block's rows and blocks are, for the notes

    def __init__(self, device: torch.device, dtype: torch.dtype, shape: tuple, capture: bool, pad: bool | None):
        self.device, self.dtype = device, dtype
        self.capacity = shape[3]
        self.capture = capture and device.type == "cuda"
        self.pad = self.capture if pad is None else pad
        self.notes: list[str] = []
        self._shape = shape  # (layers, 2, kv heads, capacity, head dim)
        self._working: torch.Tensor | None = None  # the buffer every graph reads and writes (made on first use)
        self._resident = None  # weakref to the StaticKV whose entries the working buffer holds
        self._graphs: dict[tuple[int, int], Captured] = {}  # (bucket, span) -> graph
        self._failed: set[int] = set()  # buckets whose capture failed (they run uncaptured)
        self._pool = torch.cuda.graph_pool_handle() if self.capture else None
        self._lock = threading.Lock()
        self.replays = 0  # graph replays so far (tests and the benchmark's notes read it)

    # ---- caches ---------------------------------------------------------------------------------
    def new_cache(self) -> StaticKV:
        return StaticKV(self)

    def resident_buffer(self, cache: StaticKV) -> torch.Tensor:
        """The working buffer with this cache's entries in it: the cache resident before it waits in a copy of
        its filled entries; a cache restored from a pickle (another process's, or unowned) is adopted."""
        if self._working is None:
            self._working = torch.zeros(self._shape, dtype=self.dtype, device=self.device)
        resident = self._resident() if self._resident is not None else None
        if resident is cache:
            return self._working
        if resident is not None and resident.buffer is self._working:
            resident.buffer = resident.filled().clone() if resident.length else None
        if cache.length:
            self._working[:, :, :, :cache.length] = cache.filled().to(self._working.device)
        cache.buffer, cache.owner = self._working, self
        self._resident = weakref.ref(cache)
        return self._working

    # ---- graphs ---------------------------------------------------------------------------------
    def _captured(self, buffer: torch.Tensor, bucket: int, span: int) -> Captured | None:
        key = (bucket, span)
        if key in self._graphs:
            return self._graphs[key]
        if bucket in self._failed:
            return None
        try:
            self._graphs[key] = self._record(buffer, bucket, span)
        except Exception as exc:  # a model whose forward cannot be captured runs uncaptured, with a note
            self._failed.add(bucket)
            self.notes.append(f"CUDA graph capture failed for {bucket}-{self.rows_are} {self.blocks_are} "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); they run "
                              "uncaptured.")
            return None
        return self._graphs[key]

    def _record(self, buffer: torch.Tensor, bucket: int, span: int) -> Captured:
        """Warm up on a side stream, then capture. The warm-up writes the last `bucket` entries of the span,
        which lie past the cache's filled ones (a forward that needs this graph fits in the span), so a
        cache in use keeps its entries."""
        device = self.device
        inputs = self._placeholders(bucket, span)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._run(buffer, *inputs, width=bucket, span=span)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            outputs = self._run(buffer, *inputs, width=bucket, span=span)
        return Captured(graph, inputs, outputs)

    def _placeholders(self, bucket: int, span: int) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def _run(self, buffer: torch.Tensor, *inputs, width: int, span: int):
        raise NotImplementedError

    def describe(self) -> str:
        """One line for the model panel and the benchmark's notes."""
        if not self.capture:
            return "static cache, uncaptured" + (" (padded to buckets)" if self.pad else "")
        captured = sorted({bucket for bucket, _ in self._graphs})
        failed = sorted(self._failed)
        return (f"CUDA graphs: {len(self._graphs)} captured (buckets {captured or 'none yet'})"
                + (f", capture failed for {failed}" if failed else ""))


def layer_stack(decoder, buffer: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                slots: torch.Tensor, span: int, ops: "ForwardOps", gate_up: list | None = None) -> torch.Tensor:
    """A lean decoder's layers over a block of `width` rows h (1, width, hidden) at positions (1, width), their keys
    and values written into the static buffer's `slots`, attention over its first `span` columns by the additive
    mask (width, span); the last layer's output, before the final norm."""
    inner, width = decoder.inner, h.shape[1]
    dtype = buffer.dtype
    groups = decoder.heads // decoder.kv_heads
    packed_mask = mask.repeat(groups, 1) if groups > 1 else mask
    cos, sin = inner.rotary_emb(h, positions)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    linear, d = decoder.linear, decoder.head_dim
    qk_heads = decoder.heads + decoder.kv_heads
    hidden = h.shape[-1]
    if ops.fused_norm:
        def rmsnorm(x, weight, eps):
            return F.rms_norm(x, (hidden,), weight, eps)
    else:
        rmsnorm = layer_kernel.torch_rmsnorm
    for i, (norm1, qkv, qkv_bias, w_o, b_o, norm2, w_gate, w_up, w_down) in enumerate(decoder.layers):
        x = rmsnorm(h, norm1, decoder.eps[i])
        fused = linear(x, qkv, qkv_bias)
        qk = layer_kernel.torch_rotary(fused[..., :qk_heads * d].view(1, width, qk_heads, d), cos, sin)
        q = qk[:, :, :decoder.heads].transpose(1, 2)
        k = qk[:, :, decoder.heads:].transpose(1, 2)
        v = fused[..., qk_heads * d:].view(1, width, decoder.kv_heads, d).transpose(1, 2)
        buffer[i, 0].index_copy_(1, slots, k[0].to(dtype))
        buffer[i, 1].index_copy_(1, slots, v[0].to(dtype))
        keys, values = buffer[i, 0, :, :span].unsqueeze(0), buffer[i, 1, :, :span].unsqueeze(0)
        packed_q = q.reshape(1, decoder.kv_heads, groups * width, d)
        if ops.matmul_attention:
            scores = torch.baddbmm(packed_mask, packed_q[0], keys[0].transpose(1, 2), alpha=decoder.scale)
            attended = torch.bmm(scores.softmax(-1), values[0])[None]
        else:
            attended = F.scaled_dot_product_attention(packed_q, keys, values, attn_mask=packed_mask,
                                                      scale=decoder.scale)
        attended = attended.reshape(1, decoder.heads, width, d).transpose(1, 2).reshape(1, width, decoder.heads * d)
        h = h + linear(attended, w_o, b_o)
        x = rmsnorm(h, norm2, decoder.eps[i])
        if ops.fused_mlp:
            # F.linear: the fused matrix is a plain tensor (a CPU's native kernel takes prepared weights)
            gate, up = F.linear(x, gate_up[i]).chunk(2, dim=-1)
        else:
            gate, up = linear(x, w_gate, None), linear(x, w_up, None)
        h = h + linear(F.silu(gate) * up, w_down, None)
    return rmsnorm(h, inner.norm.weight, inner.norm.variance_epsilon)


class CapturedVerifier(StaticRunner):
    """The target's verify forward over static caches, for one LoadedModel's lean decoder."""

    def __init__(self, lm, capture: bool = True, pad: bool | None = None):
        self.lm, self.decoder = lm, lm.decoder
        config = lm.model.config
        self.layers = len(self.decoder.layers)
        shape = (self.layers, 2, self.decoder.kv_heads, lm.max_context + BUCKETS[-1], self.decoder.head_dim)
        super().__init__(lm.device, lm.dtype, shape, capture, pad)
        self._host: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # bucket -> pinned (inputs, summary)
        self.hidden = config.hidden_size
        self.ops = ForwardOps()
        self._gate_up: list[torch.Tensor] | None = None

    def set_ops(self, ops: ForwardOps) -> None:
        """Switch the forward's op variants; graphs recorded with others are dropped (recaptured on use)."""
        if ops != self.ops:
            self._graphs.clear()
            self._failed.clear()
            # a fresh memory pool: capturing into the pool of graphs just freed trips an internal assert of
            # torch's caching allocator (seen on torch 2.11, H200)
            self._pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.ops = ops
        if ops.fused_mlp and self._gate_up is None:
            from specviz.runtime.lean_forward import fuse_linear

            self._gate_up = [fuse_linear([layer.mlp.gate_proj, layer.mlp.up_proj])[0]
                             for layer in self.decoder.inner.layers]

    # ---- forwards -------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, cache: StaticKV, tokens: list[int], parents: list[int], past_len: int,
                features: bool = False) -> VerifyOutput:
        """The verify forward of a tree's n nodes (root first; parents[0] = 0) at past_len: its logits (n, vocab)
        fp32, the features (n, hidden) fp32 when asked for, and the top-k summary made on the device
        (runtime.verify_output.DeviceSummary, read by accept.verification.LogitTop). The cache grows by n entries."""
        n = len(tokens)
        bucket = bucket_for(n) if self.pad else None
        width = bucket or n
        if past_len + width > self.capacity:
            raise ValueError(f"{past_len} cached + {width} new entries exceed the static cache's {self.capacity}")
        with self._lock:
            buffer = self.resident_buffer(cache)
            inputs, host_summary = self._inputs(width)
            inputs[:n] = torch.as_tensor(tokens, dtype=torch.long)
            inputs[width:width + n] = torch.as_tensor(parents, dtype=torch.long)
            if width > n:
                inputs[n:width] = 0
                inputs[width + n:2 * width] = torch.arange(n, width)  # padding rows are their own parents
            inputs[2 * width] = past_len
            span = span_for(past_len + width, self.capacity)
            captured = self._captured(buffer, width, span) if bucket is not None and self.capture else None
            if captured is not None:
                captured.inputs[0].copy_(inputs, non_blocking=True)
                captured.graph.replay()
                self.replays += 1
                logits, hidden, summary = captured.outputs
            else:
                logits, hidden, summary = self._run(buffer, inputs.to(self.lm.device), width=width, span=span)
            host_summary.copy_(summary, non_blocking=True)
            if self.lm.device.type == "cuda":
                torch.cuda.current_stream().synchronize()
            cache.length = past_len + n
            logits, hidden = logits[:n].clone(), hidden[:n].clone()
            summary = DeviceSummary(host_summary.numpy()[:n].copy())
        return VerifyOutput(logits, hidden if features else None, summary)

    @torch.inference_mode()
    def prefill(self, cache: StaticKV, tokens: list[int], features: bool = False):
        """A prompt chunk appended in order, each token seeing all before it: a chain, uncaptured (its
        length varies). Logits (n, vocab) fp32, or (logits, features)."""
        n, past = len(tokens), cache.length
        if past + n > self.capacity:
            raise ValueError(f"{past} cached + {n} new entries exceed the static cache's {self.capacity}")
        inputs = torch.tensor([*tokens, 0, *range(n - 1), past], dtype=torch.long).to(self.lm.device)
        with self._lock:
            buffer = self.resident_buffer(cache)
            logits, hidden, _ = self._run(buffer, inputs, width=n, span=span_for(past + n, self.capacity), summary=False)
        cache.length = past + n
        return (logits, hidden) if features else logits

    def _inputs(self, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Host buffers (pinned on CUDA) for a forward of `width` rows: its input vector and its summary."""
        if width not in self._host:
            pin = self.lm.device.type == "cuda"
            summary_width = 2 * min(TOP_K, self.lm.vocab_size) + 4
            self._host[width] = (torch.empty(2 * width + 1, dtype=torch.long, pin_memory=pin),
                                 torch.empty((width, summary_width), dtype=torch.float32, pin_memory=pin))
        return self._host[width]

    def _placeholders(self, bucket: int, span: int) -> tuple[torch.Tensor]:
        inputs = torch.zeros(2 * bucket + 1, dtype=torch.long, device=self.device)
        inputs[bucket:2 * bucket] = torch.arange(bucket, device=self.device)
        inputs[2 * bucket] = span - bucket
        return (inputs,)

    def _run(self, buffer: torch.Tensor, inputs: torch.Tensor, *, width: int, span: int, summary: bool = True):
        """The static forward of `width` rows (what a graph records): inputs (2 * width + 1,) int64 on the
        device; attention over the cache's first `span` columns. Returns logits (width, vocab) fp32, features
        (width, hidden) fp32 and the summary (None unless asked for)."""
        tokens, parents, past = inputs[:width], inputs[width:2 * width], inputs[2 * width]
        visible_block = ancestor_closure(parents)                                    # (w, w)
        positions = (past + visible_block.sum(-1) - 1)[None]                         # (1, w): past + depth
        columns = torch.arange(span, device=inputs.device)
        slots = past + torch.arange(width, device=inputs.device)                     # (w,) where the block goes
        in_block = (columns >= past) & (columns < past + width)
        block_column = (columns - past).clamp(0, width - 1)
        visible = torch.where(in_block[None, :], visible_block[:, block_column], (columns < past)[None, :])
        h = self.decoder.inner.embed_tokens(tokens[None])
        h = layer_stack(self.decoder, buffer, h, positions, additive_mask(visible, buffer.dtype)[0, 0], slots, span,
                        self.ops, self._gate_up)
        logits = self.decoder.linear(h, self.decoder.head, getattr(self.lm.model.lm_head, "bias", None))[0].float()
        return logits, h[0].float(), summarise(logits, parents, tokens) if summary else None


GRAPH_CHOICES = ("auto", "on", "off", "static")


def install(lm, graphs: str | None) -> str | None:
    """Set the model's verify forward: 'on' captures CUDA graphs (a CUDA device and the lean decoder), 'off'
    keeps the dynamic cache and eager forward, 'auto' is 'on' on CUDA and 'off' elsewhere, 'static' runs the
    static cache uncaptured and padded (the CPU's stand-in for the captured path, for tests). Returns a note
    where what was asked for cannot run here (the model then runs as 'off')."""
    choice = (graphs or "auto").strip().lower()
    if choice not in GRAPH_CHOICES:
        raise ValueError(f"graphs {graphs!r}: choose one of {', '.join(GRAPH_CHOICES)}")
    if choice == "auto":
        choice = "on" if lm.device.type == "cuda" and lm.decoder is not None and not lm.compiled else "off"
    note = None
    if choice in ("on", "static") and lm.decoder is None:
        choice, note = "off", "CUDA graphs need the lean forward (a Llama-shaped model): the eager forward runs."
    elif choice in ("on", "static") and lm.compiled:
        choice, note = "off", "CUDA graphs and compile are two ways to the same end: the compiled forward runs."
    elif choice == "on" and lm.device.type != "cuda":
        choice, note = "off", f"CUDA graphs need a CUDA device (this model runs on {lm.device}): the eager forward runs."
    if choice == "off":
        if lm.verifier is not None:
            lm.parked_verifier, lm.verifier = lm.verifier, None
        return note
    capture = choice == "on"
    parked = lm.parked_verifier
    if parked is not None and parked.capture == capture:
        lm.verifier, lm.parked_verifier = parked, None
    elif lm.verifier is None or lm.verifier.capture != capture:
        lm.verifier = CapturedVerifier(lm, capture=capture, pad=True)
    return None
