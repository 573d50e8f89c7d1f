"""A lean decoder forward for Llama-shaped models: the verify forward without transformers' module stack.

One flat loop (gpt-fast style) runs the stock forward's arithmetic without its per-call module overhead, q/k/v as one
matmul over a fused matrix the modules' weights are views into (gate and up stay two matmuls: fusing them did not pay;
docs/benchmarks.md, "Measurements once kept in code comments"). Every tree forward of every method, `ar` included,
runs it, so greedy tree verification stays token-identical to one-token decoding. On a CPU in fp32 the native kernels
run inside it, or the whole loop in one call (runtime.native.decoder_kernel). Model types other than llama, mistral
and qwen2 without a sliding window keep the stock forward (`why_not` says why).

Design notes: docs/design.md, "specviz/runtime/lean_forward.py".
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from specviz.runtime import fast_linear
from specviz.runtime.feature_tap import tap_of
from specviz.runtime.linear_paths import LinearChoice
from specviz.runtime.native import attention_kernel, decoder_kernel, layer_kernel

SUPPORTED = ("llama", "mistral", "qwen2")


def why_not(model) -> str | None:
    config = model.config
    if getattr(config, "model_type", None) not in SUPPORTED:
        return f"model type {getattr(config, 'model_type', '?')!r} is not Llama-shaped"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) \
            and config.model_type != "llama":
        return "sliding-window attention"
    if getattr(config, "rope_scaling", None) and (config.rope_scaling or {}).get("rope_type", "default") not in (
            "default", "llama3", "linear", "dynamic"):
        return "an unusual rotary scaling"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or getattr(model, "lm_head", None) is None:
        return "no model.layers / lm_head"
    layer = inner.layers[0]
    if not all(hasattr(layer.self_attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")) \
            or not all(hasattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
        return "layers are not q/k/v/o + gate/up/down"
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False) \
            or getattr(config, "attention_bias", False) and config.model_type == "llama":
        return "an activation or biases other than Llama's"
    return None


def fuse_linear(modules: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One (sum of outs, in) weight whose row blocks the modules' weights become views of."""
    weight = torch.cat([m.weight.data for m in modules], dim=0).contiguous()
    biases = [m.bias for m in modules]
    bias = torch.cat([b.data for b in biases], dim=0) if all(b is not None for b in biases) else None
    row = 0
    for m in modules:
        rows = m.weight.shape[0]
        m.weight.data = weight[row:row + rows]
        if bias is not None:
            m.bias.data = bias[row:row + rows]
        row += rows
    return weight, bias


def _as_is(weight: torch.Tensor, module=None) -> torch.Tensor:
    return weight


@dataclass(frozen=True)
class LinearVariant:
    """The decoder's linear layers for one kernel: the kernel and every weight in the form it takes."""
    linear: Callable            # linear(x, weight, bias)
    layers: list[tuple]         # per layer: norm1, qkv, qkv bias, o, o bias, norm2, gate, up, down
    head: object                # the lm head's weight


class LeanDecoder:
    def __init__(self, model, linear, prepare=_as_is, kernel: str | None = None, packed: bool = False):
        """linear(x, weight, bias) is the kernel the model runs (runtime.fast_linear or F.linear);
        prepare(weight, module) gives a weight in the form that kernel takes (e.g. oneDNN's packed copy).
        kernel: its name among runtime.fast_linear.CHOICES where it is one (then the decoder can also run the
        others, per tree size: use_paths), packed: whether oneDNN's packed weights exist on the modules."""
        config, inner = model.config, model.model
        self.model, self.inner, self.linear = model, inner, linear
        self.kernel, self.packed = kernel, packed
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim ** -0.5
        self.eps = [layer.input_layernorm.variance_epsilon for layer in inner.layers]
        self._fused = [fuse_linear([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj])
                       for layer in inner.layers]  # dense (weight, bias) of each layer's q/k/v
        self.layers, self.head = self._prepared(prepare)
        self.variants = {kernel: LinearVariant(linear, self.layers, self.head)} if kernel else {}
        self.choice: LinearChoice | None = None  # the kernel per tree size (use_paths); None: this one at every size
        self._forced = threading.local()  # .kernel: the kernel every forward of this thread runs (calibration)
        # the two halves of a layer (runtime.modes' compile swaps in compiled versions: one graph each,
        # weights as inputs, so every layer shares it)
        self.before_attention, self.after_attention = self._before_attention, self._after_attention
        self.native_attention = True  # runtime.native.attention_kernel where it runs (False: always ATen's)
        self.native_glue = True  # runtime.native.layer_kernel where it runs (False: torch's ops; the compiled mode)
        self.native_layers = True  # runtime.native.decoder_kernel where it runs (False: the loop below, call by call)
        self.glue = None  # per forward: runtime.native.layer_kernel's library, or None for torch's ops
        self._native = None  # runtime.native.decoder_kernel.NativeDecoder, built on first use ("no": it cannot run here)

    def _prepared(self, prepare) -> tuple[list[tuple], object]:
        layers = []
        for layer, (qkv, qkv_bias) in zip(self.inner.layers, self._fused):
            attn, mlp = layer.self_attn, layer.mlp
            fused = (attn.q_proj, attn.k_proj, attn.v_proj)  # the modules whose rows qkv stacks
            layers.append((layer.input_layernorm.weight, prepare(qkv, fused), qkv_bias,
                           prepare(attn.o_proj.weight, attn.o_proj), attn.o_proj.bias,
                           layer.post_attention_layernorm.weight, prepare(mlp.gate_proj.weight, mlp.gate_proj),
                           prepare(mlp.up_proj.weight, mlp.up_proj), prepare(mlp.down_proj.weight, mlp.down_proj)))
        return layers, prepare(self.model.lm_head.weight, self.model.lm_head)

    def variant(self, kernel: str) -> LinearVariant:
        """The linear layers for another kernel of runtime.fast_linear.CHOICES, weights prepared on first use
        (oneDNN's packed copies are the modules' own; only the fused q/k/v matrices are packed anew)."""
        if kernel not in self.variants:
            layers, head = self._prepared(fast_linear.weight_preparer(kernel, self.packed))
            self.variants[kernel] = LinearVariant(fast_linear.kernel(kernel), layers, head)
        return self.variants[kernel]

    def use_paths(self, choice: LinearChoice | None) -> None:
        """Run each tree size with the kernel the choice keeps for it (None: the decoder's own at every size)."""
        kept = {self.kernel, *(choice.paths if choice is not None else ())}
        for path in kept - {None}:
            self.variant(path)
        for path in set(self.variants) - kept:  # measured, not chosen: its weights (packed q/k/v copies) go
            del self.variants[path]
        self.choice = choice

    def path_for(self, rows: int) -> str | None:
        """The kernel a forward of `rows` tokens runs in this thread (None: a decoder built without kernel names)."""
        forced = getattr(self._forced, "kernel", None)
        if forced is not None:
            return forced
        return self.choice.path_for(rows) if self.choice is not None else self.kernel

    @contextlib.contextmanager
    def forcing(self, kernel: str | None):
        """A context in which this thread's forwards all run `kernel` (None: as chosen), for measuring it."""
        if kernel is not None:
            self.variant(kernel)
        previous = getattr(self._forced, "kernel", None)
        self._forced.kernel = kernel
        try:
            yield
        finally:
            self._forced.kernel = previous

    def native_decoder(self):
        """runtime.native.decoder_kernel's NativeDecoder for this model, or None where it cannot run (or is off)."""
        if not (self.native_layers and self.native_glue and self.native_attention):
            return None
        if self._native is None:
            self._native = decoder_kernel.for_decoder(self) or "no"
        return None if self._native == "no" else self._native

    def _rmsnorm(self, h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if self.glue is not None:
            return layer_kernel.rmsnorm(self.glue, h, weight, eps)
        return layer_kernel.torch_rmsnorm(h, weight, eps)

    def _rotate(self, qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """q and k heads (1, n, heads + kv_heads, d), a view of the fused q/k/v output, rotated (in place
        by the native kernel)."""
        if self.glue is not None:
            return layer_kernel.rotary(self.glue, qk, qk.shape[2], cos, sin)
        return layer_kernel.torch_rotary(qk, cos, sin)

    def _gated(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        if self.glue is not None:
            return layer_kernel.silu_mul(self.glue, gate, up)
        return F.silu(gate) * up

    def _attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                   packed_mask: torch.Tensor | None, kernel) -> torch.Tensor:
        """q (1, heads, n, d); k, v (1, kv_heads, past + n, d); mask (n, past + n) additive; packed_mask the
        tree mask once per query head of a group (for ATen). Returns (1, n, heads * d). kernel:
        runtime.native.attention_kernel's library where it runs here (fp32 on a CPU): it reads q and writes the output
        in token-major layout, so neither is copied. Else ATen's scaled_dot_product_attention, the query
        heads that share a key/value head stacked along the query axis so the cache is read in place."""
        n, groups = q.shape[2], self.heads // self.kv_heads
        if kernel is not None:
            out = torch.empty(1, n, self.heads * self.head_dim)
            attention_kernel.attend(kernel, q.transpose(1, 2), k, v, mask, self.scale,
                                    out.view(1, n, self.heads, self.head_dim))
            return out
        packed = q.reshape(1, self.kv_heads, groups * n, self.head_dim)
        out = F.scaled_dot_product_attention(packed, k, v, attn_mask=packed_mask, scale=self.scale)
        return out.reshape(1, self.heads, n, self.head_dim).transpose(1, 2).reshape(1, n, self.heads * self.head_dim)

    def _before_attention(self, h, norm, qkv, qkv_bias, cos, sin, eps: float, linear=None):
        """rmsnorm, the fused q/k/v matmul and rotary: q (1, heads, n, d), k and v (1, kv_heads, n, d).
        cos, sin (1, n, 1, d): q and k heads are rotated in one pass (the same numbers as one by one).
        linear: the kernel (None: the decoder's own)."""
        n = h.shape[1]
        qk_heads = self.heads + self.kv_heads
        fused = (linear or self.linear)(self._rmsnorm(h, norm, eps), qkv, qkv_bias)
        qk = self._rotate(fused[..., :qk_heads * self.head_dim].view(1, n, qk_heads, self.head_dim), cos, sin)
        v = fused[..., qk_heads * self.head_dim:].view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
        return qk[:, :, :self.heads].transpose(1, 2), qk[:, :, self.heads:].transpose(1, 2), v

    def _after_attention(self, h, attended, w_o, b_o, norm, w_gate, w_up, w_down, eps: float, linear=None):
        """The output projection and residual, then rmsnorm, the gated MLP and its residual."""
        linear = linear or self.linear
        h = h + linear(attended, w_o, b_o)
        x = self._rmsnorm(h, norm, eps)
        return h + linear(self._gated(linear(x, w_gate, None), linear(x, w_up, None)), w_down, None)

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor, cache,
                 features: bool = False):
        """Logits (n, vocab) in fp32; input_ids, position_ids (1, n); mask (n, past + n) additive in the
        model dtype; the cache grows by n entries per layer. features: also return the final norm's output
        (n, hidden) in fp32, what the head reads (a draft head drafts from it); a FeatureTap (runtime.feature_tap):
        the hidden states it names, concatenated."""
        return self.run_embedded(self.inner.embed_tokens(input_ids), position_ids, mask, cache, features)

    @torch.inference_mode()
    def run_embedded(self, h: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor, cache,
                     features: bool = False):
        """__call__ on inputs already embedded: h (1, n, hidden) in the model dtype (a draft head feeds its
        own mix of token embeddings and features here)."""
        cos, sin = self.inner.rotary_emb(h, position_ids)
        path = self.path_for(h.shape[1])
        own = path is None or path == self.kernel
        native = self.native_decoder() if own else None
        tap = tap_of(features)
        if tap is not None and not tap.final:
            native = None  # the native decoder keeps its hidden states inside: a tap of layers runs the layers here
        if native is not None and native.cache_ready(cache, len(self.layers)):
            if not features:
                return native.forward(h, cos, sin, mask, cache)
            logits, last = native.forward(h, cos, sin, mask, cache, last_hidden=True)
            return logits, layer_kernel.torch_rmsnorm(last, self.inner.norm.weight,
                                                      self.inner.norm.variance_epsilon)[0].float()
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        groups = self.heads // self.kv_heads
        kernel = attention_kernel.usable(h.dtype, h.device, self.head_dim) if self.native_attention else None
        self.glue = layer_kernel.usable(h.dtype, h.device, h.shape[-1], self.head_dim) if self.native_glue else None
        packed_mask = None
        if kernel is None:
            packed_mask = mask.repeat(groups, 1) if groups > 1 else mask  # once, not once per layer
        if own:
            linear, layers, head = None, self.layers, self.head
            before, after = self.before_attention, self.after_attention
        else:  # another kernel for this size (use_paths): its weights, through the uncompiled halves
            variant = self.variant(path)
            linear, layers, head = variant.linear, variant.layers, variant.head
            before, after = self._before_attention, self._after_attention
        tapped = []
        for i, (norm1, qkv, qkv_bias, w_o, b_o, norm2, w_gate, w_up, w_down) in enumerate(layers):
            if tap is not None and i in tap.layers:
                tapped.append(h[0].float())
            if own:
                q, k, v = before(h, norm1, qkv, qkv_bias, cos, sin, self.eps[i])
            else:
                q, k, v = before(h, norm1, qkv, qkv_bias, cos, sin, self.eps[i], linear)
            keys, values = cache.layers[i].update(k, v)
            attended = self._attention(q, keys, values, mask, packed_mask, kernel)
            if own:
                h = after(h, attended, w_o, b_o, norm2, w_gate, w_up, w_down, self.eps[i])
            else:
                h = after(h, attended, w_o, b_o, norm2, w_gate, w_up, w_down, self.eps[i], linear)
        h = self._rmsnorm(h, self.inner.norm.weight, self.inner.norm.variance_epsilon)
        logits = (linear or self.linear)(h, head, getattr(self.model.lm_head, "bias", None))[0].float()
        if tap is None:
            return logits
        return logits, (h[0].float() if tap.final else torch.cat(tapped, dim=-1))


def build(model, linear, prepare=_as_is, kernel: str | None = None,
          packed: bool = False) -> tuple[LeanDecoder | None, str | None]:
    """A LeanDecoder for the model, or None and why not where the model is not Llama-shaped. The model is
    left as it is (apart from the fused q/k/v views): the LoadedModel holds the decoder. kernel, packed: see
    LeanDecoder."""
    reason = why_not(model)
    return (LeanDecoder(model, linear, prepare, kernel, packed) if reason is None else None), reason
