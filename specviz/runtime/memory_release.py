"""The C heap's policy: keep freed memory while decoding, give it back when a session ends.

Keep: every step allocates the same large tensors again, and with glibc's defaults their pages went back to the
kernel after a step and were faulted in again on the next; `keep_freed_memory`, called after every model load, raises
the trim and mmap thresholds once per process (SPECVIZ_MALLOC=stock keeps glibc's defaults). Give back: a released
session's allocations stay in the heap, so `give_back_freed_memory` runs malloc_trim(0). Linux with glibc only;
elsewhere both are no-ops.

Design notes: docs/design.md, "specviz/runtime/memory_release.py".
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
