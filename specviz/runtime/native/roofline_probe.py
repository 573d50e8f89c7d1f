"""What this processor can do at best (roofline_probe.cc): the memory bandwidth of a streaming read and the
fused multiply-add peak at the vector width the linear kernel runs, on one thread and on the threads used.

Built like the kernels (runtime.native.build) but only when asked: `dev roofline` measures it and sets each
verify forward's time against the bound that applies (the weights' bytes for a few rows, the FLOPs for many).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.runtime.native.build import Kernel

SOURCE = Path(__file__).with_name("roofline_probe.cc")
READ_BYTES = 512 * 2**20   # the streamed buffer: far past any cache here (L3 is 32 MB per EPYC chiplet)
FMA_ITERATIONS = 20_000_000


@dataclass(frozen=True)
class Roofline:
    """The probes' best runs: GB/s of a streaming read and GFLOP/s of fused multiply-adds (2 FLOPs each)."""
    read_gbs_one_thread: float
    read_gbs: float              # on `threads` threads
    fma_gflops_one_thread: float
    fma_gflops: float            # on `threads` threads
    threads: int
    vector_floats: int           # floats per vector of the build (16: AVX-512, 8: AVX2)

    def bound_ms(self, bytes_read: float, flops: float) -> tuple[float, str]:
        """The least time a forward reading `bytes_read` and computing `flops` can take on `threads` threads,
        and which bound it is ('bytes' or 'flops')."""
        bytes_ms = bytes_read / (self.read_gbs * 1e9) * 1e3
        flops_ms = flops / (self.fma_gflops * 1e9) * 1e3
        return (bytes_ms, "bytes") if bytes_ms >= flops_ms else (flops_ms, "flops")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.roofline_probe_read.argtypes = [ptr, i64, ctypes.c_int]
    lib.roofline_probe_read.restype = ctypes.c_float
    lib.roofline_probe_fma.argtypes = [i64, ctypes.c_int]
    lib.roofline_probe_fma.restype = ctypes.c_float
    for name in ("roofline_probe_width", "roofline_probe_chains"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _self_check(lib: ctypes.CDLL) -> None:
    """The read probe sums what it reads (on a buffer whose sum is exact in fp32)."""
    data = torch.ones(64 * 1024)
    if lib.roofline_probe_read(data.data_ptr(), data.numel(), 2) != float(data.numel()):
        raise RuntimeError("the roofline probe's read does not sum its buffer")


_probe = Kernel(SOURCE, _load, _self_check)
library, status = _probe.library, _probe.status


def _best_seconds(call, repeats: int) -> float:
    """The fastest of `repeats` timed runs after one warm-up (page faults, clock ramp). A bound is what the
    machine can do, so the best run is the figure (as STREAM reports it); a median would fold in whatever
    else this shared machine ran meanwhile."""
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times[1:])


def measure(threads: int | None = None, repeats: int = 9, read_bytes: int = READ_BYTES,
            fma_iterations: int = FMA_ITERATIONS) -> Roofline:
    """Both probes on one thread and on `threads` (default: torch's thread count), each the best of
    `repeats` timed runs after one warm-up. Raises RuntimeError where the probe cannot be built."""
    lib = library()
    if lib is None:
        raise RuntimeError(f"the roofline probe is not available ({status()})")
    threads = threads or torch.get_num_threads()
    width, chains = lib.roofline_probe_width(), lib.roofline_probe_chains()
    buffer = torch.ones(read_bytes // 4)
    buffer.add_(0.0)  # touched, so the first timed read does not fault its pages in

    def read_gbs(n: int) -> float:
        return read_bytes / _best_seconds(lambda: lib.roofline_probe_read(buffer.data_ptr(), buffer.numel(), n),
                                            repeats) / 1e9

    def fma_gflops(n: int) -> float:
        flops = 2.0 * width * chains * fma_iterations * n
        return flops / _best_seconds(lambda: lib.roofline_probe_fma(fma_iterations, n), repeats) / 1e9

    return Roofline(read_gbs_one_thread=read_gbs(1), read_gbs=read_gbs(threads),
                    fma_gflops_one_thread=fma_gflops(1), fma_gflops=fma_gflops(threads),
                    threads=threads, vector_floats=width)
