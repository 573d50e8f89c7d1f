"""The C heap's policy: keep freed memory while decoding, give it back when a session ends.

Keep. Every step allocates the same large tensors again (a 65-node tree's logits are 12.8 MB, its
softmax as much again, the rows a rank count reads 4 MB). With glibc's defaults a block over the mmap
threshold is a fresh mmap, and the heap's top is trimmed once more than the trim threshold is free, so
the pages went back to the kernel after a step and were faulted in again on the next: 1,700 to 6,700
minor page faults a step at budget 64, depending on the process's history (racer's work outside the
forward: 7.2 or 5.2 ms against 4.8 kept). `keep_freed_memory`, called after every model load, raises
both thresholds once per process so that a step reuses what the last one freed: after two steps, about
5 faults a step, in the main thread and in a worker thread alike (the app steps in Gradio's threads).
Linux with glibc only; elsewhere a no-op. SPECVIZ_MALLOC=stock keeps glibc's defaults (for an A/B).

Give back. A session's KV cache is tens of MB of many-sized allocations; once a browser session ends
they are freed, but the heap keeps them and the process's resident memory stays at its peak.
malloc_trim(0) returns every free page, in the middle of the heap too, whatever the thresholds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
KEEP_BYTES = 1 << 30  # larger than any one tensor a step allocates (logits of 256 nodes: 50 MB)

_libc = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        _libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc (musl has neither function)
        _libc = None
_kept = False


def keep_freed_memory() -> bool:
    """Stop glibc returning freed blocks to the kernel between steps; True when it now keeps them."""
    global _kept
    if _libc is None or os.environ.get("SPECVIZ_MALLOC", "").strip().lower() == "stock":
        return False
    if not _kept:
        _kept = all([_libc.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES), _libc.mallopt(M_MMAP_THRESHOLD, KEEP_BYTES)])
    return _kept


def give_back_freed_memory() -> bool:
    """True when the C library was asked to return free heap memory."""
    if _libc is None:
        return False
    _libc.malloc_trim(0)
    return True
