"""The lean forward in one native call (decoder_kernel.cc), compiled once per machine by runtime.native.build.

With the linear layers, attention, norms, rotary and activation native (runtime.native.linear_kernel,
runtime.native.attention_kernel, runtime.native.layer_kernel), what the lean forward still spent outside them was Python: per
layer about ten torch dispatches (views, slices, the cache append, the residual adds) and seven ctypes
calls, 2.3 to 3 ms of a 10 ms one-token forward here. decoder_kernel.cc runs the same kernels in the same
order on the same numbers in one call (its logits are bitwise the per-call forward's), and keeps each
layer's keys transposed between forwards in the cache (kv.GrowingLayer), so only new keys are transposed.

Runs where every piece does: fp32 on a CPU, the native linear kernel's weights, head size 64 or 128, a
cache of kv.GrowingLayer layers already filled by the prefill. Elsewhere the per-call forward runs.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import torch

from specviz.runtime.native import attention_kernel
from specviz.runtime.native import layer_kernel
from specviz.runtime.native import linear_kernel
from specviz.runtime.native.build import Kernel
from specviz.runtime.gguf_blocks import KernelWeight
from specviz.runtime.kv import GrowingLayer

SOURCE = Path(__file__).with_name("decoder_kernel.cc")

# the per-layer row of addresses decoder_kernel.cc reads (its enum Slot)
SLOTS = ("norm1", "qkv", "qkv_bias", "o", "o_bias", "norm2", "gate", "up", "down", "keys", "values", "transposed")
KEYS, VALUES, TRANSPOSED = SLOTS.index("keys"), SLOTS.index("values"), SLOTS.index("transposed")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    i64, ptr, f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    lib.decoder_kernel_unsupported.argtypes = [ptr]
    lib.decoder_kernel_unsupported.restype = ctypes.c_int
    lib.decoder_kernel_forward.argtypes = [ptr, i64, i64, ptr, ptr, ptr, ptr, i64, ptr, ptr, ptr, ptr, f32, ptr, f32,
                                           ptr, ptr, ptr, ctypes.c_int]
    lib.decoder_kernel_forward.restype = None
    lib.decoder_kernel_linear_only.argtypes = [i64, ptr, i64, ptr, ptr, ptr, ptr, ctypes.c_int]
    lib.decoder_kernel_linear_only.restype = None
    lib.linear_kernel_group_columns.argtypes = []
    lib.linear_kernel_group_columns.restype = ctypes.c_int
    return lib


def _address(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else tensor.data_ptr()


def _weight_address(weight) -> int:
    """What a slot holds of a linear weight: the fp32 kernel's groups, or the quantised kernel's descriptor."""
    if isinstance(weight, KernelWeight):
        return int(weight.descriptor.ctypes.data)
    return weight.groups.data_ptr()


class NativeDecoder:
    """One LeanDecoder's weights as decoder_kernel.cc reads them: the address table (one row per layer;
    each forward fills the cache's three columns in a copy of its own, as sessions on other threads share
    this object) and the model's sizes."""

    def __init__(self, lib: ctypes.CDLL, lean):
        self.lib, self.lean = lib, lean
        config = lean.model.config
        quantised = isinstance(lean.head, KernelWeight)
        self.shape = np.array([config.hidden_size, lean.heads, lean.kv_heads, lean.head_dim,
                               config.intermediate_size, lean.head.out_features, int(quantised)], dtype=np.int64)
        self.slots = np.zeros((len(lean.layers), len(SLOTS)), dtype=np.int64)
        for row, (norm1, qkv, qkv_bias, w_o, b_o, norm2, w_gate, w_up, w_down) in zip(self.slots, lean.layers):
            row[:KEYS] = [_address(norm1), _weight_address(qkv), _address(qkv_bias), _weight_address(w_o),
                          _address(b_o), _address(norm2), _weight_address(w_gate), _weight_address(w_up),
                          _weight_address(w_down)]
        self.head_address = _weight_address(lean.head)
        self.eps = np.array(lean.eps, dtype=np.float32)
        self.head_bias = getattr(lean.model.lm_head, "bias", None)

    def supported(self) -> bool:
        return self.lib.decoder_kernel_unsupported(self.shape.ctypes.data) == 0

    @staticmethod
    def cache_ready(cache, layers: int) -> bool:
        """Whether the cache is kv.GrowingLayer layers, one per decoder layer, all filled (the prefill ran)."""
        return cache is not None and len(cache.layers) == layers and all(
            type(layer) is GrowingLayer and layer.is_initialized and layer._keys is not None
            and layer._keys.dim() == 4 and layer._keys.is_contiguous() and layer._values.is_contiguous()
            and layer.length > 0 for layer in cache.layers)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, cache,
                last_hidden: bool = False):
        """Logits (n, vocab) of h (1, n, hidden), the embedded tokens; cos, sin (1, n, d); mask (n, past + n)
        additive; the cache grows by n entries per layer. last_hidden: also return the last layer's output
        (1, n, hidden), before the final norm."""
        n = h.shape[1]
        layers = cache.layers
        past = layers[0].length
        if any(layer.length != past for layer in layers):
            raise ValueError("the cache's layers hold different lengths")
        slots = self.slots.copy()
        capacity, transposed_from = np.empty(len(layers), dtype=np.int64), np.empty(len(layers), dtype=np.int64)
        for i, layer in enumerate(layers):
            layer.reserve(past + n, layer._keys, layer._values)
            if layer.transposed is None:
                layer.transposed, layer.transposed_length = torch.empty_like(layer._keys), 0
            slots[i, KEYS:] = (layer._keys.data_ptr(), layer._values.data_ptr(), layer.transposed.data_ptr())
            capacity[i], transposed_from[i] = layer._keys.shape[-2], layer.transposed_length
        h, cos, sin, mask = h.contiguous(), cos.contiguous(), sin.contiguous(), mask.contiguous()
        logits = torch.empty(n, self.lean.head.out_features)
        self.lib.decoder_kernel_forward(
            h.data_ptr(), n, past, slots.ctypes.data, self.eps.ctypes.data, capacity.ctypes.data,
            transposed_from.ctypes.data, len(layers), self.shape.ctypes.data, cos.data_ptr(), sin.data_ptr(),
            mask.data_ptr(), self.lean.scale, self.lean.inner.norm.weight.data_ptr(),
            self.lean.inner.norm.variance_epsilon, self.head_address, _address(self.head_bias),
            logits.data_ptr(), torch.get_num_threads())
        for layer in layers:
            layer.length = layer.transposed_length = past + n
        return (logits, h) if last_hidden else logits

    def linear_only(self, n: int) -> None:
        """Every linear layer of the forward once on n rows of scratch input, as the forward calls them."""
        logits = torch.empty(n, self.lean.head.out_features)
        self.lib.decoder_kernel_linear_only(n, self.slots.ctypes.data, len(self.lean.layers), self.shape.ctypes.data,
                                            self.head_address, _address(self.head_bias),
                                            logits.data_ptr(), torch.get_num_threads())


def _layer_check(lib: ctypes.CDLL, prepare, address, linear) -> bool:
    """One layer's forward over a small cache against the per-call kernels' references, with the linear weights in
    the form prepare(dense) gives (address: what a slot holds of it; linear(x, prepared): its reference product)."""
    generator = torch.Generator().manual_seed(0)
    hidden, heads, kv_heads, d, inter, vocab, past, n = 128, 2, 1, 64, 96, 40, 21, 3

    def rand(*shape):
        return torch.randn(*shape, generator=generator) * 0.2

    norm1, norm2, final_norm = rand(hidden) + 1, rand(hidden) + 1, rand(hidden) + 1
    dense = [rand((heads + 2 * kv_heads) * d, hidden), rand(hidden, heads * d), rand(inter, hidden),
             rand(inter, hidden), rand(hidden, inter), rand(vocab, hidden)]
    w_qkv, w_o, w_gate, w_up, w_down, w_head = prepared = [prepare(w) for w in dense]
    keys, values = torch.zeros(1, kv_heads, 32, d), torch.zeros(1, kv_heads, 32, d)
    keys[:, :, :past], values[:, :, :past] = rand(1, kv_heads, past, d), rand(1, kv_heads, past, d)
    transposed = torch.empty_like(keys)
    h = rand(1, n, hidden)
    angles = rand(1, n, d // 2) * 10
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    mask = torch.zeros(n, past + n)
    mask[:, past:] = torch.triu(torch.full((n, n), torch.finfo(torch.float32).min), 1)
    # the reference: torch's ops around the linear reference
    x = layer_kernel.torch_rmsnorm(h, norm1, 1e-5)
    fused = linear(x, w_qkv)
    qk = layer_kernel.torch_rotary(fused[..., :(heads + kv_heads) * d].view(1, n, heads + kv_heads, d),
                                   cos.unsqueeze(2), sin.unsqueeze(2))
    all_keys = torch.cat([keys[:, :, :past], qk[:, :, heads:].transpose(1, 2)], 2)
    all_values = torch.cat([values[:, :, :past], fused[..., (heads + kv_heads) * d:].view(1, n, kv_heads, d).transpose(1, 2)], 2)
    attended = attention_kernel.reference(qk[:, :, :heads], all_keys, all_values, mask, d ** -0.5)
    want_h = h + linear(attended.reshape(1, n, heads * d), w_o)
    x = layer_kernel.torch_rmsnorm(want_h, norm2, 1e-5)
    want_h = want_h + linear(torch.nn.functional.silu(linear(x, w_gate)) * linear(x, w_up), w_down)
    want = linear(layer_kernel.torch_rmsnorm(want_h, final_norm, 1e-5), w_head)[0]
    # the kernel
    slots = np.array([[norm1.data_ptr(), address(w_qkv), 0, address(w_o), 0, norm2.data_ptr(), address(w_gate),
                       address(w_up), address(w_down), keys.data_ptr(), values.data_ptr(), transposed.data_ptr()]],
                     dtype=np.int64)
    shape = np.array([hidden, heads, kv_heads, d, inter, vocab, int(isinstance(w_head, KernelWeight))],
                     dtype=np.int64)
    eps, capacity, transposed_from = (np.array([1e-5], dtype=np.float32), np.array([32], dtype=np.int64),
                                      np.array([0], dtype=np.int64))
    got, state = torch.empty(n, vocab), h.clone()
    lib.decoder_kernel_forward(state.data_ptr(), n, past, slots.ctypes.data, eps.ctypes.data, capacity.ctypes.data,
                               transposed_from.ctypes.data, 1, shape.ctypes.data, cos.data_ptr(), sin.data_ptr(),
                               mask.data_ptr(), d ** -0.5, final_norm.data_ptr(), 1e-5, address(w_head),
                               0, got.data_ptr(), 1)
    del prepared
    return torch.allclose(got, want, atol=1e-4, rtol=1e-4) and torch.allclose(keys[:, :, past:past + n],
                                                                                all_keys[:, :, past:], atol=1e-5)


def _self_check(lib: ctypes.CDLL) -> None:
    """One layer's forward over a small cache against the per-call kernels' torch references: with the fp32
    kernel's grouped weights, and with the gguf mode's Q4_1 blocks (where that kernel runs here)."""
    import torch.nn.functional as F

    from specviz.runtime import gguf_blocks
    from specviz.runtime.native import quant_linear_kernel

    if not _layer_check(lib, lambda w: linear_kernel.group(w, lib), _weight_address,
                        lambda x, w: F.linear(x, _dense(w))):
        raise RuntimeError("the compiled decoder differs from torch's ops on a self-check")
    quant = quant_linear_kernel.library()
    if quant is None:
        return
    generator = torch.Generator().manual_seed(1)

    def quantised(dense: torch.Tensor) -> KernelWeight:
        matrix = quant_linear_kernel.random_matrix(gguf_blocks.Q4_1, dense.shape[0], dense.shape[1], generator)
        return gguf_blocks.kernel_layout(matrix)

    if not _layer_check(lib, quantised, _weight_address,
                        lambda x, w: quant_linear_kernel.forward(quant, x, w, threads=1)):
        raise RuntimeError("the compiled decoder differs from the per-call kernels on a self-check of the gguf mode")


def _dense(grouped: "linear_kernel.GroupedWeight") -> torch.Tensor:
    """The (out, in) weight a GroupedWeight was laid out from."""
    count, inputs, width = grouped.groups.shape
    return grouped.groups.transpose(1, 2).reshape(count * width, inputs)[:grouped.out_features]


_kernel = Kernel(SOURCE, _load, _self_check)

# library(): the loaded kernel, built on first use (None: the per-call forward); status(): 'native' or why
# not; reset(): forget the loaded kernel (tests: the next use decides again)
library, status, reset = _kernel.library, _kernel.status, _kernel.reset


def for_decoder(lean) -> NativeDecoder | None:
    """The native forward of a LeanDecoder where all of it can run here (else None: the per-call forward)."""
    device, dtype = lean.model.device, lean.model.dtype
    if device.type != "cpu" or dtype != torch.float32 or not isinstance(lean.head, (linear_kernel.GroupedWeight,
                                                                                      KernelWeight)):
        return None
    if attention_kernel.usable(dtype, device, lean.head_dim) is None or \
            layer_kernel.usable(dtype, device, lean.model.config.hidden_size, lean.head_dim) is None:
        return None
    lib = library()
    if lib is None:
        return None
    decoder = NativeDecoder(lib, lean)
    return decoder if decoder.supported() else None
