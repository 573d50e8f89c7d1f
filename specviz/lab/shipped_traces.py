"""The recorded runs shipped in assets/traces: listed by label, each parsed once per process and shared by every
session that replays it, and the `ar` trace of a prompt (the lane beside a replay)."""

from __future__ import annotations

import functools
from pathlib import Path

import specviz.methods  # noqa: F401  (each drafter registers its own source; a recording names them)
from specviz.records.trace import Trace

TRACES = Path(__file__).resolve().parents[2] / "assets" / "traces"


def shipped_traces() -> dict[str, Path]:
    """The recorded traces in assets/traces, by label (method and prompt id)."""
    return {path.stem: path for path in sorted(TRACES.glob("*.json"))}


_ar_traces: dict[tuple, Trace] = {}


def shipped_ar_trace(prompt_ids: list[int]) -> Trace | None:
    """The shipped `ar` trace of this prompt, if there is one (the replay's second lane)."""
    if not _ar_traces:
        for path in shipped_traces().values():
            if path.stem.startswith("ar-"):
                trace = Trace.load(path)
                _ar_traces[tuple(trace.prompt_ids)] = trace
    return _ar_traces.get(tuple(prompt_ids))


@functools.lru_cache(maxsize=32)
def _shipped(path: Path, mtime_ns: int) -> Trace:
    return Trace.load(path)


def shipped_trace(path: Path) -> Trace:
    """A shipped trace, read once per process and shared by every session that replays it (a first visit opens
    one for each new visitor: one parsed copy, not one per session). Views only read a trace."""
    return _shipped(path, path.stat().st_mtime_ns)
