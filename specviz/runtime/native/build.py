"""Building the engine's small C++ kernels (runtime/native/logit_kernel.cc, runtime/native/attention_kernel.cc,
runtime/native/layer_kernel.cc, runtime/native/linear_kernel.cc, runtime/native/decoder_kernel.cc) once per machine.

Each is compiled with the machine's C++ compiler (`CXX`, else g++, else c++) into the cache
(`cache_root()/native`), keyed by its source and every local file it includes (the shared header
vector_math.h; decoder_kernel.cc includes three kernels), the flags, the compiler and the processor
and the target architecture; a new build removes that kernel's older builds. Built with -fopenmp where the
compiler can, else single-threaded. SPECVIZ_NATIVE=0 turns every kernel off (torch paths instead).

SPECVIZ_NATIVE_ARCH picks the architecture (GCC's -march): `native` (the default: whatever this processor has),
or a named level such as `x86-64-v3` (AVX2 and FMA, no AVX-512), `x86-64-v2` / `x86-64` (SSE only: the kernels'
generic branch, the one a NEON machine shares the shape of) or `armv8-a`. It reproduces another machine's branch
on this one: an AVX-512 machine built for `x86-64-v3` runs the code an AVX2-only machine runs.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable

from specviz.runtime.cache_dir import cache_root

HEADER = Path(__file__).with_name("vector_math.h")
# -ffp-contract=off: no multiply-add GCC fuses on its own (vector_math.h says why); the kernels write theirs
BASE_FLAGS = ("-O3", "-std=c++17", "-ffp-contract=off", "-shared", "-fPIC", f"-I{HEADER.parent}")
ARCH_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.+-]{0,40}")
THREADED = ("-fopenmp",)  # without it (a compiler with no OpenMP) a kernel runs on one thread


def turned_off() -> bool:
    return os.environ.get("SPECVIZ_NATIVE", "1") == "0"


def architecture() -> str:
    """The -march the kernels are built for (SPECVIZ_NATIVE_ARCH, default `native`)."""
    arch = os.environ.get("SPECVIZ_NATIVE_ARCH", "").strip().lower() or "native"
    if not ARCH_PATTERN.fullmatch(arch):
        raise RuntimeError(f"SPECVIZ_NATIVE_ARCH={arch[:40]!r} is not an architecture name such as native or x86-64-v3")
    return arch


def flags() -> tuple[str, ...]:
    return (*BASE_FLAGS, f"-march={architecture()}")


def processor() -> str:
    """What -march=native compiles for: the CPU's model name and feature flags where Linux tells them."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    lines = [line for line in info.splitlines() if line.split(":")[0].strip() in ("model name", "flags", "Features")]
    return platform.machine() + "\n" + "\n".join(sorted(set(lines)))


def compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def with_includes(source: Path, seen: set[Path] | None = None) -> list[Path]:
    """The source and, in order, every file it includes with #include "..." (beside it), each once."""
    seen = set() if seen is None else seen
    if source in seen:
        return []
    seen.add(source)
    files = [source]
    for name in re.findall(r'^#include "([^"]+)"', source.read_text(), flags=re.MULTILINE):
        files += with_includes(source.parent / name, seen) if (source.parent / name).exists() \
            else with_includes(HEADER.parent / name, seen)
    return files


_building: dict[Path, threading.Lock] = {}
_building_lock = threading.Lock()


def build(source: Path, compiler_path: str, defines: tuple[str, ...] = ()) -> Path:
    """The shared library of one kernel source, compiled now unless the cache has this very build (a second
    thread asking for the same source waits for the first's compile: build_all may run beside a first use).
    defines: preprocessor names to set (a test's build of a path this processor cannot run natively, e.g.
    SPECVIZ_EMULATE_VNNI); such a build is cached apart."""
    with _building_lock:
        lock = _building.setdefault(source, threading.Lock())
    with lock:
        return _build(source, compiler_path, defines)


def _build(source: Path, compiler_path: str, defines: tuple[str, ...] = ()) -> Path:
    if not all(re.fullmatch(r"[A-Z][A-Z0-9_]{0,40}", name) for name in defines):
        raise RuntimeError(f"not preprocessor names: {defines}")
    text = b"".join(path.read_bytes() for path in with_includes(source))
    build_flags = (*flags(), *(f"-D{name}" for name in defines))
    key = hashlib.sha256(text + " ".join(build_flags).encode() + compiler_path.encode() + processor().encode()).hexdigest()[:16]
    folder = cache_root() / "native"
    # builds for other architectures (tests build two) and with other defines stay beside the default one
    stem = "-".join([source.stem, architecture(), *(name.lower() for name in defines)])
    target = folder / f"{stem}-{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        built = Path(scratch) / target.name
        for extra in (THREADED, ()):
            result = subprocess.run([compiler_path, *build_flags, *extra, "-o", str(built), str(source)],
                                    capture_output=True, text=True, timeout=120)
            if result.returncode == 0:
                break
        else:
            raise RuntimeError(f"{Path(compiler_path).name} failed: {result.stderr.strip()[-300:]}")
        os.replace(built, target)  # whole or not at all: another process may be loading it
    for older in folder.glob(f"{stem}-*.so"):  # earlier versions of this kernel (a process using one keeps it)
        if older != target and re.fullmatch(re.escape(stem) + r"-[0-9a-f]{16}\.so", older.name):
            older.unlink(missing_ok=True)
    return target


SOURCES = sorted(Path(__file__).parent.glob("*_kernel.cc"))


def build_all() -> None:
    """Compile every kernel's source at once, a compiler per core (a cold cache's builds take turns otherwise:
    the first step waits for all of them); each kernel then loads its build and checks itself on first use,
    and a build that failed here fails there again with its message."""
    if turned_off() or (compiler_path := compiler()) is None:
        return
    from concurrent.futures import ThreadPoolExecutor

    def one(source: Path) -> None:
        try:
            build(source, compiler_path)
        except (OSError, RuntimeError, subprocess.SubprocessError):
            pass

    with ThreadPoolExecutor(max_workers=max(1, min(len(SOURCES), os.cpu_count() or 1))) as pool:
        list(pool.map(one, SOURCES))


class Kernel:
    """One kernel's shared library, built and loaded on first use, then self-checked against torch; None
    (with why) where it cannot be: no compiler, a failed build or check, or SPECVIZ_NATIVE=0."""

    def __init__(self, source: Path, load: Callable, self_check: Callable):
        self.source, self.load, self.self_check = source, load, self_check
        self._lock = threading.Lock()
        self._state: dict = {}  # "lib" (the loaded library or None) and "why" (None, or why not)

    def library(self):
        if "lib" in self._state:
            return self._state["lib"]
        with self._lock:
            if "lib" not in self._state:
                lib, why = None, None
                if turned_off():
                    why = "turned off (SPECVIZ_NATIVE=0)"
                elif (compiler_path := compiler()) is None:
                    why = "no C++ compiler found (set CXX, or install g++)"
                else:
                    try:
                        lib = self.load(build(self.source, compiler_path))
                        self.self_check(lib)
                    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                        lib, why = None, str(error)
                self._state["why"], self._state["lib"] = why, lib
        return self._state["lib"]

    def status(self) -> str:
        """'native' or why the torch path is used."""
        return "native" if self.library() is not None else f"torch ({self._state['why']})"

    def reset(self) -> None:
        """Forget the loaded library (tests: the next use decides again)."""
        with self._lock:
            self._state.clear()
