"""A loaded causal LM: its weights, tokenizer, run mode and the forward backend it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from specviz.runtime import modes
from specviz.runtime.native import attention_kernel, layer_kernel

if TYPE_CHECKING:
    from specviz.runtime.lean_forward import LeanDecoder


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
    shared_key: tuple | None = None  # its key among the process's shared resources (runtime.shared), if it is one

    def shared_parts(self) -> dict:
        """What sessions may hold of this model directly: written by key in a session state (runtime.portable)."""
        return {"model": self.model, "tokenizer": self.tokenizer, "decoder": self.decoder}

    @property
    def lean(self) -> bool:
        """Whether block forwards run the lean decoder (else transformers' module stack)."""
        return self.decoder is not None

    @property
    def mode(self) -> str:
        """The run mode as a flag string (runtime.modes): 'fp32', 'bf16+compile', ..."""
        return modes.Mode(self.dtype, self.compiled).label(self.dtype)

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
        return backend

    def describe(self) -> str:
        """Everything that moves the cost of a forward, as one key: model, device, mode, linear kernel,
        forward backend and threads (the cost curve is stored under it)."""
        kernel = self.linear + ("-dense" if self.linear == "onednn" and not self.packed else "")
        return f"{self.name}|{self.device.type}|{self.mode}|{kernel}|{self.forward_backend()}|{torch.get_num_threads()}t"
