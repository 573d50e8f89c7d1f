"""Run modes: the precision the model runs in and whether its forward is compiled.

A mode is a '+'-joined set of flags: one precision (`fp32`, `bf16`, `fp16`, or `gguf`: the linear layers on a GGUF
file's own quantised blocks, everything else fp32) and optionally `compile`, e.g. `bf16+compile`; `compile` alone
keeps the device's default precision. A flag this machine cannot run, or one we do not know, never stops the user:
the mode falls back to the device default in eager mode and `notes` says why, for the CLI (stderr) and the app
(message line) to show.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

import torch

PRECISIONS = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
              "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
PRECISION_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
QUANTISED = "gguf"  # the flag of the mode whose linear layers read a GGUF file's own blocks (runtime.gguf_blocks)
MODE_CHOICES = ("fp32", "bf16", "fp16", QUANTISED, "compile", "fp32+compile", "bf16+compile")


@dataclass
class Mode:
    dtype: torch.dtype | None = None   # None: the device's default (fp32 on CPU, bf16/fp16 on CUDA)
    compiled: bool = False
    notes: list[str] = field(default_factory=list)
    quantised: bool = False            # gguf: the linear layers on the file's blocks, activations in fp32

    def label(self, dtype: torch.dtype) -> str:
        if self.quantised:
            return QUANTISED
        name = PRECISION_NAMES.get(dtype, str(dtype))
        return name + ("+compile" if self.compiled else "")


def parse_mode(text: str | None) -> Mode:
    """Flags from a mode string; an unknown flag or two precisions fall back to the default eager mode."""
    flags = [f.strip().lower() for f in (text or "").replace(",", "+").split("+") if f.strip()]
    mode = Mode()
    precisions = [f for f in flags if f in PRECISIONS or f == QUANTISED]
    unknown = [f for f in flags if f not in PRECISIONS and f not in ("compile", QUANTISED)]
    if unknown or len(set(PRECISIONS.get(p, p) for p in precisions)) > 1:
        what = f"unknown flag {', '.join(repr(u) for u in unknown)}" if unknown else "two precisions"
        return Mode(notes=[f"Mode {text!r} has {what} (choose from {', '.join(MODE_CHOICES)}): "
                           "running the default precision, eager, instead."])
    if QUANTISED in precisions:
        mode.dtype, mode.quantised = torch.float32, True
        if "compile" in flags:  # torch.compile traces torch's ops; the quantised linears are one native call each
            mode.notes.append("compile does not apply to the gguf mode (its linear layers are native calls): "
                              "running gguf eager.")
        return mode
    mode.dtype = PRECISIONS[precisions[0]] if precisions else None
    mode.compiled = "compile" in flags
    return mode


def canonical(text: str | None) -> str:
    """One spelling per mode ('bf16+compile', 'compile', '' for the default), so that a model is loaded
    once per mode whatever the user typed; a name parse_mode refuses is the default ('')."""
    mode = parse_mode(text)
    if mode.quantised:
        return QUANTISED
    if mode.notes:
        return ""
    name = PRECISION_NAMES.get(mode.dtype, "")
    return "+".join(filter(None, [name, "compile" if mode.compiled else ""]))


def settled_here(text: str | None) -> tuple[str, list[str]]:
    """The canonical mode this machine's default device will really run for text, and why it differs (the notes
    settle gives): a bf16 asked for on a CPU without bf16 runs fp32 and shares the fp32 copy of the weights
    instead of loading another."""
    mode = parse_mode(canonical(text))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ran = settle(mode, device, torch.float32)
    if ran.quantised:
        return QUANTISED, []
    if not ran.notes:
        return canonical(text), []
    name = PRECISION_NAMES.get(ran.dtype, "") if ran.dtype != torch.float32 else ""
    return "+".join(filter(None, [name, "compile" if ran.compiled else ""])), ran.notes


def why_not_precision(device: torch.device, dtype: torch.dtype) -> str | None:
    """None when this device computes in dtype at a useful speed, else why not."""
    if device.type == "cuda":
        if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return "this GPU has no bf16 support"
        return None
    if dtype == torch.float16:
        return "fp16 on a CPU is emulated and slow"
    if dtype == torch.bfloat16 and not (torch.backends.mkldnn.is_available()
                                         and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return "this CPU has no bf16 instructions that oneDNN can use"
    return None


def why_not_compile(device: torch.device) -> str | None:
    """None when torch.compile can build kernels here, else why not."""
    if device.type == "cpu" and not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        return "torch.compile needs a C++ compiler on a CPU and none was found"
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "torch.compile needs Triton on a GPU and it is not installed"
    return None


def why_not_quantised(device: torch.device) -> str | None:
    """None when the gguf mode's kernel can run here, else why not."""
    from specviz.runtime.native import quant_linear_kernel

    return quant_linear_kernel.available(device)


def settle(mode: Mode, device: torch.device, default_dtype: torch.dtype) -> Mode:
    """The mode this device will run: flags it cannot run are dropped with a note."""
    notes = list(mode.notes)
    if mode.quantised:
        why = why_not_quantised(device)
        if why is None:
            return Mode(torch.float32, False, notes, quantised=True)
        notes.append(f"{why}: running {'fp32' if device.type == 'cpu' else 'the default precision'} instead.")
        mode = Mode(None, False, notes)
    dtype = mode.dtype or default_dtype
    why = why_not_precision(device, dtype)
    if why:
        notes.append(f"{why}: running {'fp32' if device.type == 'cpu' else 'the default precision'} instead.")
        dtype = default_dtype if device.type == "cuda" and dtype != default_dtype else torch.float32
    compiled = mode.compiled
    if compiled:
        why = why_not_compile(device)
        if why:
            notes.append(f"{why}: running eager instead.")
            compiled = False
    return Mode(dtype, compiled, notes)


def compile_forward(lean) -> str | None:
    """torch.compile the two halves of every lean layer (runtime.lean_forward): norms, fused matmuls,
    rotary, activation and residuals become one graph before and one after attention, shared by all
    layers (weights are inputs) and dynamic in the number of rows; attention and the KV cache stay
    eager. lean: the model's LeanDecoder (None: it has none). Compiles lazily (the first forward of
    each new shape family pays it). Returns why not."""
    if lean is None:
        return "compile needs the lean forward (a Llama-shaped model)"
    lean.native_glue = False  # torch.compile traces torch's ops, not a native call
    lean.before_attention = torch.compile(lean._before_attention, dynamic=True)
    lean.after_attention = torch.compile(lean._after_attention, dynamic=True)
    return None
