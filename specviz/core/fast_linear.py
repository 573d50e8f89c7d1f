"""Linear layers through oneDNN's matmul on CPU.

On a small CPU, PyTorch's stock `F.linear` (MKL sgemm) costs 1.6x more for 2 rows than for 1 and grows
from there: with SmolLM2-135M's 211 linear layers, 33 ms for 1 row, 54 ms for 2, 53 ms for 8, 136 ms for
64 (2 cores, AVX-512). oneDNN's matmul, reached through `torch.ops.mkldnn._linear_pointwise` with the
same dense fp32 weights (no copy, no prepacking), costs 22 / 24 / 26 / 60 ms: both the single-token
forward and the slope of the cost curve drop, which is what makes a draft tree pay on a CPU.

The results differ from MKL's in the last bits (about 1e-6), like any change of kernel, but one model
uses one kernel for every method, so greedy tree verification stays token-identical to `ar`. Peers
(transformers' `generate`) run under `stock()` so the bench compares our forward with the stock one.
"""

from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F

CHOICES = ("onednn", "stock")
_local = threading.local()


def available(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when oneDNN linear can run here, else why not (a sentence)."""
    if device.type != "cpu":
        return f"oneDNN linear is a CPU kernel; the model is on {device.type}"
    if dtype not in (torch.float32, torch.bfloat16):
        return f"oneDNN linear runs fp32 and bf16, not {str(dtype).replace('torch.', '')}"
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return "this PyTorch build has no oneDNN linear"
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "this CPU has no bf16 support in oneDNN"
    return None


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def kernel(name: str):
    """linear(x, weight, bias) for a kernel name of CHOICES."""
    return onednn_linear if name == "onednn" else F.linear


def _onednn_forward(module: torch.nn.Linear):
    def forward(x: torch.Tensor) -> torch.Tensor:
        if getattr(_local, "stock", False) or x.dtype != module.weight.dtype:
            return F.linear(x, module.weight, module.bias)
        return torch.ops.mkldnn._linear_pointwise(x, module.weight, module.bias, "none", [], "")
    return forward


def install(model: torch.nn.Module) -> int:
    """Route every nn.Linear of the model through oneDNN; returns how many. Call only when available()."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and "forward" not in module.__dict__:
            module.forward = _onednn_forward(module)
            count += 1
    return count


@contextlib.contextmanager
def stock():
    """Within this block (this thread only) every patched linear runs PyTorch's stock F.linear."""
    previous = getattr(_local, "stock", False)
    _local.stock = True
    try:
        yield
    finally:
        _local.stock = previous
