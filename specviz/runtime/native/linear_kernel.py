"""The lean forward's linear layers on a CPU (linear_kernel.cc), compiled once per machine by runtime.native.build.

A verify forward of a few tokens is bound by reading the weights (about 536 MB in fp32 for SmolLM2-135M).
oneDNN's packed matmul reads them once too, but its one-row path is slow here and its cost grows from
2 rows on. This kernel streams each weight once, in groups of output columns (one vector wide with AVX-512,
three or four elsewhere), and keeps a block of rows x groups in registers, so every weight vector it loads serves all
the rows; the block's shape follows the row count (linear_kernel.cc). Each output is summed over the input in
order, so a row's result is bitwise the same however many rows share the call. Figures: docs/benchmarks.md,
"Native linear kernel" and "The verify forward against the roofline (issue 63)".

fp32 on a CPU only; elsewhere (bf16, CUDA, no compiler, SPECVIZ_NATIVE=0) runtime.fast_linear's oneDNN or
PyTorch's linear runs instead, and models.pick_linear says why.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.runtime.native.build import Kernel

SOURCE = Path(__file__).with_name("linear_kernel.cc")


@dataclass(frozen=True)
class GroupedWeight:
    """A (out, in) weight laid out as (ceil(out / group), in, group), zero past the last output: what the
    kernel streams (group: its output columns per register block)."""
    groups: torch.Tensor
    out_features: int
    in_features: int


def group(weight: torch.Tensor, lib: ctypes.CDLL | None = None) -> GroupedWeight:
    """The weight in the layout of the kernel `lib` (default: the loaded one)."""
    width = (lib or library()).linear_kernel_group_columns()
    out_features, in_features = weight.shape
    count = -(-out_features // width)
    padded = torch.zeros(count * width, in_features, dtype=torch.float32)
    padded[:out_features] = weight.detach()
    groups = padded.view(count, width, in_features).transpose(1, 2).contiguous()
    return GroupedWeight(groups, out_features, in_features)


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.linear_kernel_forward.argtypes = [ptr, i64, i64, ptr, i64, ptr, ptr, ctypes.c_int]
    lib.linear_kernel_forward.restype = None
    lib.linear_kernel_group_columns.argtypes = []
    lib.linear_kernel_group_columns.restype = ctypes.c_int
    lib.linear_kernel_isa.argtypes = []
    lib.linear_kernel_isa.restype = ctypes.c_char_p
    return lib


def forward(lib: ctypes.CDLL, x: torch.Tensor, weight: GroupedWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """x (..., in) fp32 -> (..., out), like F.linear(x, dense weight, bias)."""
    x = x.contiguous()
    if x.shape[-1] != weight.in_features:
        raise ValueError(f"input of {x.shape[-1]} features for a weight of {weight.in_features}")
    out = torch.empty(*x.shape[:-1], weight.out_features)
    lib.linear_kernel_forward(x.data_ptr(), x.numel() // weight.in_features, weight.in_features,
                              weight.groups.data_ptr(), weight.out_features,
                              bias.contiguous().data_ptr() if bias is not None else None, out.data_ptr(),
                              torch.get_num_threads())
    return out


def _self_check(lib: ctypes.CDLL) -> None:
    """Against F.linear on random rows, a width that is no multiple of 16, and row by row."""
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(37, 29, generator=generator), torch.randn(37, generator=generator)
    x = torch.randn(1, 9, 29, generator=generator)
    got = forward(lib, x, group(weight, lib), bias)
    if not torch.allclose(got, torch.nn.functional.linear(x, weight, bias), atol=1e-4, rtol=1e-4):
        raise RuntimeError("the compiled linear kernel differs from torch's on a self-check")
    if not torch.equal(forward(lib, x[:, 4:5], group(weight, lib), bias), got[:, 4:5]):
        raise RuntimeError("the compiled linear kernel's rows depend on the rows beside them")


_kernel = Kernel(SOURCE, _load, _self_check)

# library(): the loaded kernel, built on first use (None: not here); status(): 'native' or why not;
# reset(): forget the loaded kernel (tests: the next use decides again)
library, status, reset = _kernel.library, _kernel.status, _kernel.reset


def isa(lib: ctypes.CDLL | None = None) -> str | None:
    """The register blocking the kernel `lib` (default: the loaded one) was built with: 'avx512', 'avx2-fma',
    'neon-fma' or 'generic'; None where no kernel is built."""
    lib = lib or library()
    return lib.linear_kernel_isa().decode() if lib is not None else None


def available(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when the kernel runs here, else why not (a sentence)."""
    if device.type != "cpu":
        return f"the native linear kernel is a CPU kernel; the model is on {device.type}"
    if dtype != torch.float32:
        return f"the native linear kernel runs fp32, not {str(dtype).replace('torch.', '')}"
    if library() is None:
        return f"the native linear kernel is not available ({status()})"
    return None


def linear(x: torch.Tensor, weight: GroupedWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """The lean forward's linear(x, weight, bias) for weights prepared by group (the library is loaded)."""
    return forward(library(), x, weight, bias)
