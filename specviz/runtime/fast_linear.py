"""Linear layers through oneDNN's matmul on CPU, from weights reordered once into oneDNN's blocked layout (`pack`: a
second copy of every linear weight).

Why: on a small CPU PyTorch's stock `F.linear` (MKL sgemm) costs much more for 2 rows than for 1, while packed
oneDNN costs about the same for 2 to 8 rows, which is what makes a small draft tree pay. One model uses one kernel
for every method, so greedy tree verification stays token-identical to `ar`; peers run under `stock()`. In fp32 on a
CPU the lean forward's tree forwards run runtime.native.linear_kernel instead; the modules keep oneDNN for the prefill.

Design notes: docs/design.md, "specviz/runtime/fast_linear.py"; figures: docs/benchmarks.md, "Measurements once kept
in code comments" and "Packed oneDNN weights".
"""

from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F

CHOICES = ("native", "onednn", "stock")  # native: runtime.native.linear_kernel (the lean forward's tree forwards)
# the gguf mode's kernel (runtime.native.quant_linear_kernel): not a --linear choice, the mode's own; its weights are
# the GGUF's blocks that runtime.gguf_weights.attach_blocks put on each module
QUANTISED = "gguf"
BLOCKS_ATTRIBUTE = "_specviz_blocks"
PACK_ROWS = 64  # the batch size oneDNN lays a packed weight out for (16..128 measured alike here)
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


def pack(weight: torch.Tensor) -> torch.Tensor:
    """A copy of a dense (out, in) weight in oneDNN's blocked layout, for onednn_linear."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)


def onednn_linear(x: torch.Tensor, packed_weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed_weight, bias, "none", [], "")


def kernel(name: str):
    """linear(x, weight, bias) for a kernel name of CHOICES; its weight is what weight_preparer gives."""
    if name == "native":
        from specviz.runtime.native import linear_kernel
        return linear_kernel.linear
    if name == QUANTISED:
        from specviz.runtime.native import quant_linear_kernel
        return quant_linear_kernel.linear
    return onednn_linear if name == "onednn" else F.linear


def weight_preparer(name: str, packed: bool):
    """prepare(weight, module=None): a weight in the form kernel(name) takes. With packed oneDNN weights
    that is the module's packed copy (made by install, so a weight is packed once) or, for a weight no
    module owns (a fused matrix), a new packed copy; for the native kernel, the weight in its groups
    (runtime.native.linear_kernel); otherwise the dense weight itself."""
    if name == "native":
        from specviz.runtime.native import linear_kernel
        return lambda weight, module=None: linear_kernel.group(weight)
    if name == QUANTISED:
        return quantised_weight
    if name != "onednn" or not packed:
        return lambda weight, module=None: weight

    def prepare(weight: torch.Tensor, module: torch.nn.Linear | None = None) -> torch.Tensor:
        own = getattr(module, "_specviz_packed", None)
        return own if own is not None else pack(weight)
    return prepare


def quantised_weight(weight: torch.Tensor, module=None):
    """The gguf kernel's form of a module's weight: its GGUF blocks in the kernel's layout; module may be a tuple of
    modules whose weights were fused by rows (q, k and v), whose blocks are stacked the same way. A weight without
    blocks (a draft head's own) is a mistake of the caller: those run a float kernel (LoadedModel.float_linear)."""
    from specviz.runtime import gguf_blocks

    modules = module if isinstance(module, tuple) else (module,)
    blocks = [getattr(m, BLOCKS_ATTRIBUTE, None) for m in modules]
    if any(b is None for b in blocks):
        raise ValueError("the gguf kernel reads a GGUF's blocks, and this weight has none")
    matrix = blocks[0] if len(blocks) == 1 else gguf_blocks.concat(blocks)
    if (matrix.out_features, matrix.in_features) != tuple(weight.shape):
        raise ValueError(f"blocks of {matrix.out_features}x{matrix.in_features} for a {tuple(weight.shape)} weight")
    return gguf_blocks.kernel_layout(matrix)


def linear_weight_bytes(model: torch.nn.Module) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in model.modules() if isinstance(m, torch.nn.Linear))


def _available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def room_to_pack(model: torch.nn.Module) -> str | None:
    """None when this PyTorch can pack weights and a packed copy of the linear weights fits comfortably in
    free memory, else why not."""
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return "this PyTorch build cannot pack weights for oneDNN: oneDNN runs from the dense weights"
    needed, available = linear_weight_bytes(model), _available_memory_bytes()
    if available is not None and 2 * needed > available:
        return (f"packed oneDNN weights need {needed / 2**30:.1f} GB more and {available / 2**30:.1f} GB are "
                "free: oneDNN runs from the dense weights (slower for small trees)")
    return None


def _onednn_forward(module: torch.nn.Linear, packed: bool):
    weight = module._specviz_packed if packed else module.weight

    def forward(x: torch.Tensor) -> torch.Tensor:
        if getattr(_local, "stock", False) or x.dtype != module.weight.dtype:
            return F.linear(x, module.weight, module.bias)
        return torch.ops.mkldnn._linear_pointwise(x, weight, module.bias, "none", [], "")
    return forward


def install(model: torch.nn.Module, packed: bool = True) -> int:
    """Route every nn.Linear of the model through oneDNN, from a packed copy of its weight when `packed`
    (the dense one stays for stock()); returns how many. Call only when available()."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and "forward" not in module.__dict__:
            if packed:
                module._specviz_packed = pack(module.weight)
            module.forward = _onednn_forward(module, packed)
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
