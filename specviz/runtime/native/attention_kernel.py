"""The lean forward's attention on a CPU (attention_kernel.cc), compiled once per machine by runtime.native.build.

ATen's scaled_dot_product_attention reaches about 130 GFLOP/s here on a tree's attention (2 cores,
SmolLM2-135M: 9 query heads over 3 key/value heads of 64 dims, a 512-token cache), where the linear layers
reach about 350. The kernel reads each key once for the query heads that share it, scores 16 keys per
vector from a transposed copy of the keys, and skips keys masked for every row of a block; its rows are
bitwise independent of the tree around them (see the .cc). Where it cannot run (not fp32 on a CPU, a head
size other than 64 or 128, keys not laid out row by row, no compiler, SPECVIZ_NATIVE=0) the forward keeps
scaled_dot_product_attention; `status()` says which.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
import torch.nn.functional as F

from specviz.runtime.native.build import Kernel

SOURCE = Path(__file__).with_name("attention_kernel.cc")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.attention_kernel_unsupported.argtypes = [i64]
    lib.attention_kernel_unsupported.restype = ctypes.c_int
    lib.attention_kernel_attend.argtypes = [ptr, i64, i64, i64, i64, ptr, ptr, i64, i64, i64, i64, ptr,
                                            ctypes.c_float, ptr, i64, i64]
    lib.attention_kernel_attend.restype = None
    return lib


def reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """What the kernel computes, through ATen: q (1, n, heads, d), keys and values (1, kv_heads, keys, d),
    mask (n, keys); returns (1, n, heads, d)."""
    _, n, heads, d = q.shape
    kv_heads = keys.shape[1]
    groups = heads // kv_heads
    packed = q.transpose(1, 2).reshape(1, kv_heads, groups * n, d)
    packed_mask = mask.repeat(groups, 1) if groups > 1 else mask
    out = F.scaled_dot_product_attention(packed, keys, values, attn_mask=packed_mask, scale=scale)
    return out.reshape(1, heads, n, d).transpose(1, 2)


def _self_check(lib: ctypes.CDLL) -> None:
    """Against ATen on a random tree attention (two heads of 64, 3 groups, a partly masked cache)."""
    generator = torch.Generator().manual_seed(0)
    n, past = 5, 37
    q = torch.randn(1, n, 6, 64, generator=generator)
    buffer = torch.randn(2, 1, 2, past + n + 7, 64, generator=generator)
    keys, values = buffer[0, :, :, :past + n], buffer[1, :, :, :past + n]
    mask = torch.zeros(n, past + n)
    mask[:, past:] = torch.triu(torch.full((n, n), float("-inf")), 1)
    mask[2, past + 1] = float("-inf")
    got = attend(lib, q, keys, values, mask, 0.125)
    if not torch.allclose(got, reference(q, keys, values, mask, 0.125), atol=1e-5):
        raise RuntimeError("the compiled attention differs from torch's on a self-check")


_kernel = Kernel(SOURCE, _load, _self_check)


# library(): the loaded kernel, built on first use (None: the torch path); status(): 'native' or why the
# forward uses scaled_dot_product_attention; reset(): forget the loaded kernel (tests: the next use decides again)
library, status, reset = _kernel.library, _kernel.status, _kernel.reset


def usable(dtype: torch.dtype, device: torch.device, head_dim: int) -> ctypes.CDLL | None:
    """The kernel, where a model of this dtype, device and head size can use it."""
    if device.type != "cpu" or dtype != torch.float32:
        return None
    lib = library()
    if lib is None or lib.attention_kernel_unsupported(head_dim):
        return None
    return lib


def attend(lib: ctypes.CDLL, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
           scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """q (1, n, heads, d) in any layout whose rows of d are contiguous (a view of the forward's rotated
    q/k); keys, values (1, kv_heads, keys, d) with rows of d contiguous (heads may lie apart, as in the
    cache's buffer); mask (n, keys) additive, contiguous. Writes out (1, n, heads, d), rows of d contiguous
    (a new tensor when not given) and returns it."""
    _, n, heads, head_dim = q.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    if out is None:
        out = torch.empty(1, n, heads, head_dim)
    if not (q.stride(3) == keys.stride(3) == out.stride(3) == 1 and keys.stride(2) == head_dim
            and keys.stride() == values.stride() and mask.shape == (n, length) and mask.is_contiguous()
            and heads % kv_heads == 0):
        raise ValueError(f"attention shapes the kernel does not take: q {tuple(q.shape)} strides {q.stride()}, "
                         f"keys {tuple(keys.shape)} strides {keys.stride()}, mask {tuple(mask.shape)}")
    lib.attention_kernel_attend(q.data_ptr(), q.stride(1), q.stride(2), n, heads // kv_heads, keys.data_ptr(),
                                values.data_ptr(), keys.stride(1), kv_heads, length, head_dim, mask.data_ptr(),
                                scale, out.data_ptr(), out.stride(1), out.stride(2))
    return out
