"""A loaded causal LM: its weights, tokenizer, run mode and the forward backend it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from specviz.runtime import fast_linear, modes
from specviz.runtime.linear_paths import LinearChoice
from specviz.runtime.native import attention_kernel, layer_kernel, linear_kernel

if TYPE_CHECKING:
    from specviz.runtime.captured_forward import CapturedVerifier
    from specviz.runtime.lean_forward import LeanDecoder


MEASURED_FROM_BYTES = 64 * 2**20  # linear weights from which each tree size's kernel is measured (linear_paths)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    eos_ids: set[int] = field(default_factory=set)
    max_context: int = 2048
    load_s: float = 0.0
    linear: str = "stock"  # which kernel the linear layers run: fast_linear.CHOICES
    packed: bool = False    # whether oneDNN runs from packed copies of the weights (runtime.fast_linear)
    compiled: bool = False  # whether the decoder layers run through torch.compile (runtime.modes)
    decoder: "LeanDecoder | None" = None  # the lean forward (runtime.lean_forward); None: transformers' forward
    notes: list[str] = field(default_factory=list)  # what was asked for and could not be had here
    shared_key: tuple | None = None  # its key among the process's shared resources (runtime.shared_resources), if it is one
    linear_forced: bool = False  # the kernel was asked for (--linear, SPECVIZ_LINEAR, compile): no other is measured
    linear_choice: LinearChoice | None = None  # the kernel per tree size, as measured here (runtime.linear_paths)
    verifier: "CapturedVerifier | None" = None  # static-cache verify forward (CUDA graphs); None: the dynamic cache
    parked_verifier: "CapturedVerifier | None" = None  # one switched off (its graphs kept for switching back)
    quantised: bool = False  # the gguf mode: tree forwards read the GGUF's blocks (runtime.gguf_blocks)

    def new_cache(self, dynamic: bool = False):
        """A KV cache for this model's verify forwards: the captured path's static cache where it is on, else
        transformers' DynamicCache with growing layers (runtime.kv). A session keeps the kind it started with.
        dynamic: the DynamicCache even where the static one is on (a drafter that taps inner layers, which the
        captured forward does not return: EAGLE-3)."""
        if self.verifier is not None and not dynamic:
            return self.verifier.new_cache()
        from specviz.runtime.kv import new_cache

        return new_cache(self.model.config)

    @cached_property
    def control_ids(self) -> frozenset[int]:
        """The tokenizer's special tokens that do not end a sequence (`<|im_start|>`): the chat template writes them;
        a reply rarely does, so the planner learns drafts of them apart (engine.planner.CONTROL_PRIOR)."""
        special = getattr(self.tokenizer, "all_special_ids", None) or ()
        return frozenset(int(i) for i in special) - set(self.eos_ids)

    @property
    def graphs(self) -> bool:
        """Whether verify forwards replay CUDA graphs (runtime.captured_forward)."""
        return self.verifier is not None and self.verifier.capture

    def linear_candidates(self) -> list[str]:
        """The linear kernels a tree forward of this model can run here, its own first (what calibration times).
        Only its own for a model whose linear weights fit in the caches (MEASURED_FROM_BYTES): its forward is not
        bound by reading them, its timings are mostly noise, and a kernel picked by noise would only change bits."""
        if self.linear_forced or self.decoder is None or self.decoder.kernel is None or self.device.type != "cpu" \
                or fast_linear.linear_weight_bytes(self.model) < MEASURED_FROM_BYTES:
            return [self.linear]
        found = [self.linear]
        if linear_kernel.available(self.device, self.dtype) is None and "native" not in found:
            found.append("native")
        if fast_linear.available(self.device, self.dtype) is None and "onednn" not in found:
            found.append("onednn")
        if "stock" not in found:
            found.append("stock")
        return found

    def measures_linear_paths(self) -> bool:
        """Whether calibration times several linear kernels and keeps the fastest per tree size."""
        return len(self.linear_candidates()) > 1

    def apply_linear_choice(self, choice: LinearChoice | None) -> None:
        """Run each tree size with the kernel the choice keeps (None: the model's own kernel at every size)."""
        self.linear_choice = choice
        if self.decoder is not None and self.decoder.kernel is not None:
            self.decoder.use_paths(choice)

    @property
    def float_linear(self) -> str:
        """The kernel for float weights beside this model (a draft head's own): its own kernel, or in the gguf mode
        the native fp32 one where it runs, else oneDNN, else stock."""
        if self.linear != fast_linear.QUANTISED:
            return self.linear if self.linear in fast_linear.CHOICES else "stock"
        if linear_kernel.available(self.device, self.dtype) is None:
            return "native"
        return "onednn" if fast_linear.available(self.device, self.dtype) is None else "stock"

    def linear_path_for(self, rows: int) -> str:
        """The kernel a forward of `rows` tokens runs."""
        return self.linear_choice.path_for(rows) if self.linear_choice is not None else self.linear

    def linear_summary(self) -> str:
        """Which linear kernel runs at which tree size, and why, in one line."""
        if self.linear_choice is None:
            why = "asked for" if self.linear_forced else (
                "not measured yet: the cost curve's calibration times every kernel" if self.measures_linear_paths()
                else "the only kernel here")
            return f"{self.linear} at every size ({why})"
        return "; ".join(self.linear_choice.explain()) + " (measured on this processor)"

    def shared_parts(self) -> dict:
        """What sessions may hold of this model directly: written by key in a session state (runtime.state_pickle)."""
        return {"model": self.model, "tokenizer": self.tokenizer, "decoder": self.decoder}

    @property
    def lean(self) -> bool:
        """Whether block forwards run the lean decoder (else transformers' module stack)."""
        return self.decoder is not None

    @property
    def mode(self) -> str:
        """The run mode as a flag string (runtime.modes): 'fp32', 'bf16+compile', ..."""
        return modes.Mode(self.dtype, self.compiled, quantised=self.quantised).label(self.dtype)

    @cached_property
    def parameter_count(self) -> int:
        """The model's weights, counted on first use."""
        return sum(p.numel() for p in self.model.parameters())

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def forward_backend(self) -> str:
        """Which forward runs this model's blocks, and which of its native kernels run here (a machine with
        no compiler: none): 'lean', 'lean-sdpa-torchops-calls', 'stock', ..."""
        if self.decoder is None:
            return "stock"
        backend, decoder = "lean", self.decoder
        if attention_kernel.usable(self.dtype, self.device, decoder.head_dim) is None:
            backend += "-sdpa"
        if not decoder.native_glue or layer_kernel.usable(self.dtype, self.device, self.model.config.hidden_size,
                                                          decoder.head_dim) is None:
            backend += "-torchops"
        if decoder.native_decoder() is None:
            backend += "-calls"
        if self.verifier is not None:
            backend += "-graphs" if self.verifier.capture else "-static"
        return backend

    def description(self) -> str:
        """What the app's model panel says of this model (Markdown): where and how it runs."""
        packed = " with packed weights" if self.packed and self.linear == "onednn" else ""
        notes = "".join(f" ⚠️ {note}" for note in self.notes)
        return (f"Loaded **{self.name}** on {self.device}, mode **{self.mode}** (linear kernel {self.linear}{packed}, "
                f"{'lean' if self.lean else 'stock'} forward), context {self.max_context}. Linear kernel by tree "
                f"size: {self.linear_summary()}."
                + (f" Verify forward: {self.verifier.describe()}." if self.verifier is not None else "") + notes)

    def describe(self) -> str:
        """Everything that moves the cost of a forward, as one key: model, device, mode, linear kernel,
        forward backend and threads (the cost curve is stored under it)."""
        kernel = self.linear + ("-dense" if self.linear == "onednn" and not self.packed else "")
        if self.measures_linear_paths():
            kernel = "auto-" + kernel  # its kernel per size is measured (runtime.linear_paths)
        return f"{self.name}|{self.device.type}|{self.mode}|{kernel}|{self.forward_backend()}|{torch.get_num_threads()}t"
