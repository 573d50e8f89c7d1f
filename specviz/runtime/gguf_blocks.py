"""GGUF's quantised blocks: the one place that knows their layouts (ggml's Q4_0, Q4_1 and Q8_0: 32 inputs a block,
an fp16 scale, Q4_1 an fp16 minimum too) and the layout runtime/native/quant_linear_kernel.cc streams them in.

A matrix is read as the file stores it (`QuantisedMatrix`: one row of blocks per output) and laid out once for the
kernel (`kernel_layout`): output rows in groups of 8, each group's blocks one after another with the 8 rows' codes
interleaved 4 inputs a lane, and the fp16 scales as the file has them in a stream beside. Nothing is requantised: the
kernel reads the file's own codes and scales, and `dequantised` gives bit for bit what gguf's own dequantiser gives
(the float32 weights of the fp32 mode)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

BLOCK = 32   # inputs per block, every type here
GROUP = 8    # output rows per group of the kernel's layout


@dataclass(frozen=True)
class BlockType:
    """One ggml block type: its name in gguf, its code in the kernel (quant_linear_kernel.cc's Kind), its bytes."""
    name: str
    code: int
    block_bytes: int        # bytes of one block in the file
    has_minimum: bool       # Q4_1: value = code * d + m
    four_bit: bool          # codes are nibbles (else signed bytes)

    @property
    def quant_bytes(self) -> int:
        """Bytes of one group's block in the kernel's layout (8 rows' codes)."""
        return GROUP * BLOCK // 2 if self.four_bit else GROUP * BLOCK

    @property
    def scale_halves(self) -> int:
        return 2 * GROUP if self.has_minimum else GROUP


Q4_0 = BlockType("Q4_0", 0, 18, False, True)
Q4_1 = BlockType("Q4_1", 1, 20, True, True)
Q8_0 = BlockType("Q8_0", 2, 34, False, False)
TYPES = {t.name: t for t in (Q4_0, Q4_1, Q8_0)}


@dataclass(frozen=True)
class QuantisedMatrix:
    """An (out, in) weight as a GGUF stores it: per output row its in / 32 blocks, raw bytes."""
    kind: BlockType
    rows: np.ndarray          # (out, in / 32 * block_bytes) uint8
    in_features: int

    @property
    def out_features(self) -> int:
        return int(self.rows.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes)

    def take_rows(self, order) -> "QuantisedMatrix":
        """The matrix with its output rows in the given order (a row is whole blocks: nothing is recoded)."""
        return QuantisedMatrix(self.kind, np.ascontiguousarray(self.rows[np.asarray(order)]), self.in_features)

    def fields(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(d (out, blocks) fp16, m (out, blocks) fp16 or None, codes (out, blocks, 32) int8: one input each, in
        input order; nibbles as 0..15)."""
        blocks = self.in_features // BLOCK
        raw = self.rows.reshape(self.out_features, blocks, self.kind.block_bytes)
        d = raw[..., 0:2].copy().view(np.float16)[..., 0]
        m = raw[..., 2:4].copy().view(np.float16)[..., 0] if self.kind.has_minimum else None
        start = 4 if self.kind.has_minimum else 2
        packed = raw[..., start:]
        if self.kind.four_bit:  # byte j holds input j (low nibble) and input j + 16 (high nibble)
            codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.int8)
        else:
            codes = packed.view(np.int8)
        return d, m, codes

    def dequantised(self) -> torch.Tensor:
        """The float32 (out, in) weight: what gguf.quants.dequantize gives for the same bytes."""
        d, m, codes = self.fields()
        values = codes.astype(np.float32)
        if self.kind is Q4_0:
            values -= 8.0
        out = values * d.astype(np.float32)[..., None]
        if m is not None:
            out += m.astype(np.float32)[..., None]
        return torch.from_numpy(out.reshape(self.out_features, self.in_features))


def concat(matrices: list[QuantisedMatrix]) -> QuantisedMatrix:
    """Matrices of one type and input width stacked by output rows (q, k and v as one)."""
    kinds = {m.kind for m in matrices}
    widths = {m.in_features for m in matrices}
    if len(kinds) != 1 or len(widths) != 1:
        raise ValueError("only matrices of one block type and input width stack")
    return QuantisedMatrix(matrices[0].kind, np.concatenate([m.rows for m in matrices]), matrices[0].in_features)


def read_matrix(tensor) -> QuantisedMatrix | None:
    """A gguf ReaderTensor's blocks, or None for a type this kernel does not read (F32 norms, K-quants, ...)."""
    kind = TYPES.get(tensor.tensor_type.name)
    if kind is None:
        return None
    in_features = int(tensor.shape[0])  # GGUF lists dimensions fastest first
    rows = np.asarray(tensor.data, dtype=np.uint8).reshape(int(tensor.shape[1]), -1)
    return QuantisedMatrix(kind, rows, in_features)


@dataclass(frozen=True)
class KernelWeight:
    """A QuantisedMatrix laid out for quant_linear_kernel.cc, and the descriptor it reads (quant::Matrix)."""
    kind: BlockType
    quants: torch.Tensor      # (groups, blocks, kind.quant_bytes) uint8
    scales: torch.Tensor      # (groups, blocks, kind.scale_halves) fp16
    out_features: int
    in_features: int
    descriptor: np.ndarray    # int64: kind, out, in, the two addresses

    @property
    def nbytes(self) -> int:
        return int(self.quants.numel() + 2 * self.scales.numel())


def kernel_layout(matrix: QuantisedMatrix) -> KernelWeight:
    """The matrix in the kernel's groups (rows past the last output are zero and never written)."""
    if matrix.in_features % BLOCK:
        raise ValueError(f"an input width of {matrix.in_features} is no whole number of {BLOCK}-blocks")
    d, m, codes = matrix.fields()
    out, blocks = d.shape
    groups = -(-out // GROUP)
    pad = groups * GROUP - out

    def padded(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)]) if pad else a

    codes, d = padded(codes), padded(d)
    # (groups, 8 rows, blocks, 32 inputs) -> per group and block the vectors of 8 lanes x 4 inputs
    per_row = codes.reshape(groups, GROUP, blocks, BLOCK).transpose(0, 2, 1, 3)  # (groups, blocks, 8, 32)
    if matrix.kind.four_bit:
        nibbles = per_row.astype(np.uint8)
        packed = nibbles[..., :16] | (nibbles[..., 16:] << 4)           # ggml's own byte order: input j | j + 16
        vectors = packed.reshape(groups, blocks, GROUP, 4, 4).transpose(0, 1, 3, 2, 4)  # (.., v, lane, 4 bytes)
    else:
        vectors = per_row.view(np.uint8).reshape(groups, blocks, GROUP, 8, 4).transpose(0, 1, 3, 2, 4)
    quants = np.ascontiguousarray(vectors).reshape(groups, blocks, matrix.kind.quant_bytes)
    scale_parts = [d.reshape(groups, GROUP, blocks).transpose(0, 2, 1)]
    if m is not None:
        scale_parts.append(padded(m).reshape(groups, GROUP, blocks).transpose(0, 2, 1))
    scales = np.ascontiguousarray(np.concatenate(scale_parts, axis=-1))
    quants_t = _aligned(torch.from_numpy(quants))
    scales_t = torch.from_numpy(scales.view(np.int16)).view(torch.float16).contiguous()
    descriptor = np.array([matrix.kind.code, out, matrix.in_features, quants_t.data_ptr(), scales_t.data_ptr()],
                          dtype=np.int64)
    return KernelWeight(matrix.kind, quants_t, scales_t, out, matrix.in_features, descriptor)


def _aligned(tensor: torch.Tensor, alignment: int = 64) -> torch.Tensor:
    """A copy of tensor whose data starts on an `alignment`-byte boundary (the kernel's aligned vector loads)."""
    flat = tensor.reshape(-1)
    storage = torch.empty(flat.numel() + alignment, dtype=tensor.dtype)
    offset = (-storage.data_ptr()) % alignment // tensor.element_size()
    view = storage[offset:offset + flat.numel()]
    view.copy_(flat)
    return view.view(tensor.shape)
