"""The `gguf` mode's linear layers (quant_linear_kernel.cc): a GGUF file's own Q4_0, Q4_1 and Q8_0 blocks times rows
quantised to 8 bits, compiled once per machine by runtime.native.build.

A one-token forward of the default model reads about 96 MB of blocks where the fp32 kernel reads 538 MB of floats;
a tree of a few tokens reads them once too, each row's integer dot products exact and its sums in a fixed order, so a
row's result is bitwise the same however many rows share the call (the mode's `ar` and every tree agree token for
token). The layouts are runtime.gguf_blocks'; a vector path that differs from the scalar reference by one bit fails
the self-check and the kernel is not used. Figures: docs/benchmarks.md, "The gguf mode (issue 71)".
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from specviz.runtime.gguf_blocks import BLOCK, Q4_0, Q4_1, Q8_0, KernelWeight, QuantisedMatrix, kernel_layout
from specviz.runtime.native.build import Kernel

SOURCE = Path(__file__).with_name("quant_linear_kernel.cc")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.quant_linear_forward.argtypes = [ptr, ptr, i64, ptr, ptr, ctypes.c_int]
    lib.quant_linear_forward.restype = None
    lib.quant_linear_reference.argtypes = [ptr, ptr, i64, ptr, ptr]
    lib.quant_linear_reference.restype = None
    lib.quant_linear_quantise.argtypes = [ptr, i64, i64, ptr, ptr]
    lib.quant_linear_quantise.restype = None
    lib.quant_linear_unsupported.argtypes = [i64, i64]
    lib.quant_linear_unsupported.restype = ctypes.c_int
    lib.quant_linear_isa.argtypes = []
    lib.quant_linear_isa.restype = ctypes.c_char_p
    return lib


def _call(lib, entry: str, x: torch.Tensor, weight: KernelWeight, bias: torch.Tensor | None, threads: int | None):
    x = x.contiguous()
    if x.dtype != torch.float32:
        raise ValueError(f"the quantised kernel takes fp32 rows, not {x.dtype}")
    if x.shape[-1] != weight.in_features:
        raise ValueError(f"input of {x.shape[-1]} features for a weight of {weight.in_features}")
    out = torch.empty(*x.shape[:-1], weight.out_features)
    rows = x.numel() // weight.in_features
    bias_address = bias.contiguous().data_ptr() if bias is not None else None
    if entry == "reference":
        lib.quant_linear_reference(weight.descriptor.ctypes.data, x.data_ptr(), rows, bias_address, out.data_ptr())
    else:
        lib.quant_linear_forward(weight.descriptor.ctypes.data, x.data_ptr(), rows, bias_address, out.data_ptr(),
                                 threads or torch.get_num_threads())
    return out


def forward(lib: ctypes.CDLL, x: torch.Tensor, weight: KernelWeight, bias: torch.Tensor | None = None,
            threads: int | None = None) -> torch.Tensor:
    """x (..., in) fp32 -> (..., out): the vector path of this build."""
    return _call(lib, "forward", x, weight, bias, threads)


def reference(lib: ctypes.CDLL, x: torch.Tensor, weight: KernelWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The same through the kernel's scalar definition (what every vector path must equal bitwise)."""
    return _call(lib, "reference", x, weight, bias, None)


def quantised_rows(lib: ctypes.CDLL, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) as the kernel quantises it: codes (M, K) int8 and per block of 32 its scale (M, K / 32)."""
    x = x.contiguous().float()
    rows, width = x.shape
    codes, scales = torch.empty(rows, width, dtype=torch.int8), torch.empty(rows, width // BLOCK)
    lib.quant_linear_quantise(x.data_ptr(), rows, width, codes.data_ptr(), scales.data_ptr())
    return codes, scales


def random_matrix(kind, out_features: int, in_features: int, generator: torch.Generator) -> QuantisedMatrix:
    """A matrix of random blocks of one type, as a GGUF would store it (tests and the self-check)."""
    blocks = in_features // BLOCK
    raw = torch.randint(0, 256, (out_features, blocks, kind.block_bytes), generator=generator, dtype=torch.uint8)
    scales = (torch.rand(out_features, blocks, 2, generator=generator) * 0.02 + 0.001).half()
    scales[..., 1] -= 0.01  # a minimum of either sign
    raw[..., 0:2] = scales[..., 0:1].view(torch.uint8)
    if kind.has_minimum:
        raw[..., 2:4] = scales[..., 1:2].view(torch.uint8)
    return QuantisedMatrix(kind, raw.reshape(out_features, -1).numpy(), in_features)


def _self_check(lib: ctypes.CDLL) -> None:
    """Each block type against the scalar reference bitwise (rows 1 to 9, a width that is no multiple of 8, a bias),
    a row alone against the same row among others, and against the dequantised weights in float."""
    generator = torch.Generator().manual_seed(0)
    for kind in (Q4_0, Q4_1, Q8_0):
        matrix = random_matrix(kind, 21, 64, generator)
        weight = kernel_layout(matrix)
        x = torch.randn(9, 64, generator=generator)
        bias = torch.randn(21, generator=generator)
        got = forward(lib, x, weight, bias)
        if not torch.equal(got, reference(lib, x, weight, bias)):
            raise RuntimeError(f"the compiled quantised kernel differs from its scalar definition ({kind.name})")
        if not torch.equal(forward(lib, x[4:5], weight, bias), got[4:5]):
            raise RuntimeError(f"the compiled quantised kernel's rows depend on the rows beside them ({kind.name})")
        dense = torch.nn.functional.linear(x, matrix.dequantised(), bias)
        if not torch.allclose(got, dense, atol=0.05 * float(dense.abs().max()), rtol=0):
            raise RuntimeError(f"the compiled quantised kernel is far from its dequantised weights ({kind.name})")


_kernel = Kernel(SOURCE, _load, _self_check)

# library(): the loaded kernel, built on first use (None: not here); status(): 'native' or why not;
# reset(): forget the loaded kernel (tests: the next use decides again)
library, status, reset = _kernel.library, _kernel.status, _kernel.reset


def isa(lib: ctypes.CDLL | None = None) -> str | None:
    """Which instructions the built kernel's dot products use ('avx2', 'avx512vnni-256', 'generic', ...)."""
    lib = lib or library()
    return lib.quant_linear_isa().decode() if lib is not None else None


def available(device: torch.device) -> str | None:
    """None when the kernel runs here, else why not (a sentence)."""
    if device.type != "cpu":
        return f"the gguf mode's kernel is a CPU kernel; the model is on {device.type}"
    if library() is None:
        return f"the gguf mode's kernel is not available ({status()})"
    return None


def supports(matrix: QuantisedMatrix) -> bool:
    lib = library()
    return lib is not None and lib.quant_linear_unsupported(matrix.kind.code, matrix.in_features) == 0


def linear(x: torch.Tensor, weight: KernelWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """The lean forward's linear(x, weight, bias) for weights laid out by gguf_blocks.kernel_layout."""
    return forward(library(), x, weight, bias)


def descriptor_address(weight: KernelWeight) -> int:
    """Where the kernel's descriptor of weight lies (runtime.native.decoder_kernel's slots hold it)."""
    return int(weight.descriptor.ctypes.data)

