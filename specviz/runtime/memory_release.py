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
from dataclasses import dataclass

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


class _Mallinfo2(ctypes.Structure):  # glibc's struct mallinfo2 (2.33 on), every field a size_t
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


@dataclass(frozen=True)
class HeapFigures:
    """The C heap now: bytes in use by allocations, and bytes freed but kept by the heap (what malloc_trim could
    give back, fragmentation permitting)."""
    in_use: int
    free_kept: int


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


def heap_figures() -> HeapFigures | None:
    """glibc's mallinfo2 (all arenas); None where there is none (another C library, glibc before 2.33)."""
    info = getattr(_libc, "mallinfo2", None) if _libc is not None else None
    if info is None:
        return None
    info.restype = _Mallinfo2
    figures = info()
    return HeapFigures(in_use=figures.uordblks + figures.hblkhd, free_kept=figures.fordblks)


KEPT_FREE_TRIMMED = 64 << 20  # freed bytes the heap may keep while nothing computes, before they are given back
# glibc's count of freed bytes after the last idle trim (lowered whenever a reading is lower): a trim returns the pages
# of the free chunks but the chunks stay free in the count, so the count alone would call for a trim every time
_free_after_trim = 0


def give_back_when_kept(min_free: int = KEPT_FREE_TRIMMED) -> bool:
    """malloc_trim(0) when the heap keeps more than min_free freed bytes beyond what it kept after the last such trim;
    for a time when no step runs (a step's tensors are what the kept bytes are for). True when it trimmed. In the soak
    (issue 73) the heap kept 455 MB freed at the end, over 114 at the start: the crowd's stopped prefills free their
    caches without a session's release, the only other time the heap is trimmed. After a trim the count still says
    274-407 MB (the pages went back, the chunks are still free), so without the baseline every idle watch would walk
    the heap under its locks again for nothing."""
    global _free_after_trim
    heap = heap_figures()
    if heap is None:
        return False
    _free_after_trim = min(_free_after_trim, heap.free_kept)  # freed chunks reused since: growth counts from here
    if heap.free_kept - _free_after_trim <= min_free:
        return False
    trimmed = give_back_freed_memory()
    after = heap_figures()
    _free_after_trim = (after or heap).free_kept
    return trimmed
