"""The lean forward's elementwise work on a CPU (layer_kernel.cc), compiled once per machine by runtime.native.build.

Per layer the lean forward runs two rmsnorms (about eight torch ops each), a rotary embedding (about
seven) and a gated activation (two): around 25 dispatches, allocations and passes of a few microseconds
each over a handful of rows, about 2.7 ms of a 29 ms 16-token forward here. One native call does each.
fp32 on a CPU only, with hidden and head sizes the kernel's vectors divide (16 and 32); elsewhere, and in
the compiled mode (torch.compile traces the torch ops), torch's ops run.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
import torch.nn.functional as F

from specviz.runtime.native.build import Kernel

SOURCE = Path(__file__).with_name("layer_kernel.cc")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    i64, ptr, f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    lib.layer_kernel_rmsnorm.argtypes = [ptr, ptr, f32, i64, i64, ptr]
    lib.layer_kernel_rotary.argtypes = [ptr, i64, i64, i64, i64, ptr, ptr]
    lib.layer_kernel_silu_mul.argtypes = [ptr, ptr, i64]
    for function in (lib.layer_kernel_rmsnorm, lib.layer_kernel_rotary, lib.layer_kernel_silu_mul):
        function.restype = None
    return lib


def torch_rmsnorm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = h.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(h.dtype)


def torch_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _self_check(lib: ctypes.CDLL) -> None:
    """Each function against its torch ops on random rows."""
    generator = torch.Generator().manual_seed(0)
    h, weight = torch.randn(1, 3, 64, generator=generator), torch.randn(64, generator=generator)
    qk = torch.randn(1, 3, 5, 64, generator=generator)
    angles = torch.randn(1, 3, 1, 32, generator=generator)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    gate, up = torch.randn(1, 3, 48, generator=generator) * 6, torch.randn(1, 3, 48, generator=generator)
    checks = [(rmsnorm(lib, h, weight, 1e-5), torch_rmsnorm(h, weight, 1e-5)),
              (rotary(lib, qk.clone(), 5, cos, sin), torch_rotary(qk, cos, sin)),
              (silu_mul(lib, gate.clone(), up), F.silu(gate) * up)]
    if not all(torch.allclose(got, want, atol=1e-5, rtol=1e-5) for got, want in checks):
        raise RuntimeError("the compiled layer kernel differs from torch's ops on a self-check")


_kernel = Kernel(SOURCE, _load, _self_check)

# library(): the loaded kernel, built on first use (None: torch's ops); status(): 'native' or why torch's
# ops run; reset(): forget the loaded kernel (tests: the next use decides again)
library, status, reset = _kernel.library, _kernel.status, _kernel.reset


def usable(dtype: torch.dtype, device: torch.device, hidden: int, head_dim: int) -> ctypes.CDLL | None:
    """The kernel, where a model of this dtype, device, hidden size and head size can use it."""
    if device.type != "cpu" or dtype != torch.float32 or hidden % 16 or head_dim % 32:
        return None
    return library()


def rmsnorm(lib: ctypes.CDLL, h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """torch_rmsnorm of contiguous rows (..., dim), into a new tensor."""
    out = torch.empty_like(h)
    lib.layer_kernel_rmsnorm(h.data_ptr(), weight.data_ptr(), eps, h.numel() // h.shape[-1], h.shape[-1], out.data_ptr())
    return out


def rotary(lib: ctypes.CDLL, qk: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates the first `heads` heads of every row of qk (1, n, any heads, d) in place (rows may lie apart,
    as the q/k part of the fused q/k/v output does) and returns it; cos, sin (1, n, 1, d) contiguous."""
    _, n, _, d = qk.shape
    lib.layer_kernel_rotary(qk.data_ptr(), qk.stride(1), n, heads, d, cos.data_ptr(), sin.data_ptr())
    return qk


def silu_mul(lib: ctypes.CDLL, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate <- silu(gate) * up in place (contiguous, the same shape); returns gate."""
    lib.layer_kernel_silu_mul(gate.data_ptr(), up.data_ptr(), gate.numel())
    return gate
