"""A stand-in for `spaces.GPU` on ZeroGPU, for tests without a GPU: every call runs in a freshly forked child that
gets its arguments pickled, sends each result (each yield of a generator) back pickled, and exits; nothing it
changed survives but what it sent. It records the bytes and the seconds each call's pickling took."""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from dataclasses import dataclass, field


@dataclass
class CallLog:
    calls: int = 0
    argument_bytes: list[int] = field(default_factory=list)
    result_bytes: list[int] = field(default_factory=list)
    pickle_s: list[float] = field(default_factory=list)   # parent side: arguments dumped + results loaded


def _send(out, kind: str, value) -> None:
    blob = pickle.dumps((kind, value), protocol=pickle.HIGHEST_PROTOCOL)
    out.write(len(blob).to_bytes(8, "little"))
    out.write(blob)
    out.flush()


def _read_exact(fd: int, n: int, timeout_s: float) -> bytes:
    """n bytes from fd ("" at the end), or TimeoutError when the worker sends nothing for timeout_s."""
    chunks, left = [], n
    while left:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"the forked worker sent nothing for {timeout_s} s")
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def forked(fn, log: CallLog | None = None, timeout_s: float = 300):
    """fn (a generator function) wrapped as ZeroGPU runs it: one fork per call, pickles both ways."""
    log = log if log is not None else CallLog()

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        payload = pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        log.pickle_s.append(time.perf_counter() - started)
        log.calls += 1
        log.argument_bytes.append(len(payload))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: arguments from bytes, results to bytes, then gone
            os.close(read)
            code = 0
            try:
                with os.fdopen(write, "wb") as out:
                    try:
                        call_args, call_kwargs = pickle.loads(payload)
                        for item in fn(*call_args, **call_kwargs):
                            _send(out, "item", item)
                    except BaseException as error:  # noqa: BLE001
                        _send(out, "error", f"{type(error).__name__}: {error}")
            except BaseException:  # noqa: BLE001 (the parent stopped reading)
                code = 1
            os._exit(code)
        os.close(write)
        finished = False
        try:
            while header := _read_exact(read, 8, timeout_s):
                blob = _read_exact(read, int.from_bytes(header, "little"), timeout_s)
                log.result_bytes.append(len(blob))
                started = time.perf_counter()
                kind, value = pickle.loads(blob)
                log.pickle_s.append(time.perf_counter() - started)
                if kind == "error":
                    raise RuntimeError(f"worker error: {value}")
                yield value
            finished = True
        finally:
            os.close(read)
            if not finished:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

    wrapper.log = log
    return wrapper
