"""Give freed memory back to the operating system. A session's KV cache is tens of MB of many-sized
allocations; once a browser session ends they are freed, but glibc keeps the freed heap for reuse and the
process's resident memory stays at its peak. malloc_trim(0) returns what is free (Linux with glibc; a
no-op elsewhere)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_libc = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        _libc = None


def give_back_freed_memory() -> bool:
    """True when the C library was asked to return free heap memory."""
    if _libc is None:
        return False
    _libc.malloc_trim(0)
    return True
