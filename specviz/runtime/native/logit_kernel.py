"""The native pass over a verify forward's logits (logit_kernel.cc), compiled once per machine.

After a tree's forward every logits row is read for its top-16 (argmax, ranks, margins, the copy-logit
table) and its logsumexp (probabilities), and the parent rows of nodes outside their parent's top-16 once
more for a rank count. In torch these are four or five passes over (q, 49,152) floats, and inside a step
each pass reads from memory: the lm-head's 113 MB weight stream has just evicted the logits from the
caches. Here one pass per row does all of it while the row is in cache, on torch's own threads (65 x
49,152 logits right after a head matmul, 2 cores, median of 40: 1.65 ms in torch against 0.52 ms).

Built by runtime.native.build (the machine's C++ compiler, cached per source and processor); a machine without a
compiler, or where the build or its self-check fails, keeps the torch path (the same numbers: top-k and
ranks bitwise, bar which of more than k equal values make the cut; logsumexp to ~1e-6) and `status()`
says why. SPECVIZ_NATIVE=0 turns it off.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import torch

from specviz.runtime.native.build import Kernel

SOURCE = Path(__file__).with_name("logit_kernel.cc")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    i64, f32p, i64p, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int
    lib.logit_kernel_unsupported.argtypes = [i64, i32]
    lib.logit_kernel_unsupported.restype = i32
    lib.logit_kernel_summarise.argtypes = [f32p, i64, i64, i32, f32p, i64p, f32p, i32, i64p, i64p, f32p, i64p,
                                           ctypes.c_void_p, f32p]
    lib.logit_kernel_summarise.restype = None
    return lib


def _self_check(lib: ctypes.CDLL) -> None:
    """The compiled kernel against torch on one random block of logits, before anything relies on it."""
    logits = torch.randn(5, 4096, generator=torch.Generator().manual_seed(0)) * 4
    values, ids, norms = (torch.from_numpy(array) for array in summarise(lib, logits, 16))
    want_values, want_ids = logits.topk(16, dim=-1)
    if not (torch.equal(values, want_values) and torch.equal(ids, want_ids)
            and torch.allclose(norms, torch.logsumexp(logits, -1), atol=1e-4)):
        raise RuntimeError("the compiled kernel's results differ from torch's on a self-check")


_kernel = Kernel(SOURCE, _load, _self_check)


# library(): the loaded kernel, built on first use (None: the torch path); status(): 'native' or why the
# logits are summarised in torch; reset(): forget the loaded kernel (tests: the next use decides again)
library, status, reset = _kernel.library, _kernel.status, _kernel.reset


def usable(logits: torch.Tensor, k: int) -> ctypes.CDLL | None:
    """The kernel, where it can take these logits: fp32 on the CPU, contiguous rows, a vocabulary it handles."""
    if logits.device.type != "cpu" or logits.dtype != torch.float32 or logits.dim() != 2 or not logits.is_contiguous():
        return None
    lib = library()
    if lib is None:
        return None
    key = (lib, logits.shape[1], k)
    supported = _supported.get(key)
    if supported is None:  # asked once per shape (a ctypes call costs ~10 us from cold caches)
        supported = _supported[key] = not lib.logit_kernel_unsupported(logits.shape[1], k)
    return lib if supported else None


_supported: dict[tuple, bool] = {}  # (library, vocab, k): whether the kernel takes that shape


def summarise(lib: ctypes.CDLL, logits: torch.Tensor, k: int, parents: list[int] | None = None,
              tokens: list[int] | None = None, entropies: bool = False) -> tuple:
    """Each row's k largest logits and their ids (best first; equal values by lower id) and its logsumexp;
    lib: what usable(logits, k) gave. With the draft nodes' parents and tokens (nodes 1..q-1 of a tree
    whose node i is row i) also, per node, its token's logit under its parent's row, its rank there (its
    place in the row's top-k when it is there, else the count of larger logits), its probability there
    (float64; the root: 0, -1 and nan) and, where asked, each row's entropy (nats; else None):
    (values, ids, log_norms, token_logits, ranks, probs, row_entropies). All numpy arrays: right after a
    forward every call runs from cold caches, and a torch allocation costs several times a numpy one there."""
    rows, vocab = logits.shape
    values = np.empty((rows, k), dtype=np.float32)
    ids = np.empty((rows, k), dtype=np.int64)
    norms = np.empty(rows, dtype=np.float32)
    row_entropies = np.empty(rows, dtype=np.float32) if entropies else None
    entropy_address = _address(row_entropies) if entropies else None
    threads = torch.get_num_threads()
    if parents is not None and (len(parents) != rows - 1 or len(tokens) != rows - 1):
        raise ValueError(f"{len(parents)} draft nodes for {rows} logits rows (one row per node, root first)")
    if parents is None or rows == 1:
        lib.logit_kernel_summarise(logits.data_ptr(), rows, vocab, k, _address(values), _address(ids),
                                   _address(norms), threads, None, None, None, None, None, entropy_address)
        if parents is None:
            return values, ids, norms
        return (values, ids, norms, np.zeros(1, dtype=np.float32), np.full(1, -1, dtype=np.int64),
                np.full(1, np.nan), row_entropies)
    if not (min(parents) >= 0 and max(parents) < rows and min(tokens) >= 0 and max(tokens) < vocab):
        raise ValueError("a node's token or parent lies outside the logits")
    # parents and tokens by node, in one ctypes array (the kernel groups the nodes by parent itself): numpy's
    # preparation took 150 us from cold caches even for an `ar` step's one-row tree (the kernel: 30)
    tables = (ctypes.c_int64 * (2 * rows))(-1, *parents, 0, *tokens)
    base = ctypes.addressof(tables)
    token_logits, ranks, probs = np.empty(rows, dtype=np.float32), np.empty(rows, dtype=np.int64), np.empty(rows)
    lib.logit_kernel_summarise(logits.data_ptr(), rows, vocab, k, _address(values), _address(ids), _address(norms),
                               threads, base, base + rows * ctypes.sizeof(ctypes.c_int64), _address(token_logits),
                               _address(ranks), _address(probs), entropy_address)
    token_logits[0], ranks[0], probs[0] = 0.0, -1, np.nan  # the root has no parent row
    return values, ids, norms, token_logits, ranks, probs, row_entropies


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]
