"""Which linear-layer kernel a tree forward runs at each tree size, measured on this machine.

The fastest kernel depends on the processor and the row count, so nothing is assumed: when the cost curve is
calibrated (engine.costmodel) every kernel that runs here is timed at every calibration size, and `choose` keeps the
fastest per size, switching from the smaller size's kernel only where that saves SWITCH_MARGIN (two kernels agree to
fp32 rounding, not bitwise). The choice is stored beside the curve, keyed by the processor, and applied when a model
loads. `--linear NAME` (or SPECVIZ_LINEAR) forces one kernel at every size.

Design notes: docs/design.md, "specviz/runtime/linear_paths.py".
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from specviz.runtime.cache_files import write_atomically
from specviz.runtime.cache_dir import cache_root
from specviz.runtime.native import build

SWITCH_MARGIN = 0.10  # a kernel replaces the smaller size's kernel only where it saves at least this share
REVISION = 1  # bumped when what a choice holds changes


def processor_key() -> str:
    """A short hash of the processor's model name and feature flags (what the kernels' speed depends on) and
    the architecture the native kernels are built for (runtime.native.build)."""
    try:
        arch = build.architecture()
    except RuntimeError:
        arch = "invalid"
    return hashlib.sha256((build.processor() + "\n" + arch).encode()).hexdigest()[:12]


def processor_name() -> str:
    """The processor's model name, as `lscpu` shows it (for messages)."""
    for line in build.processor().splitlines():
        if line.split(":")[0].strip() == "model name":
            return line.split(":", 1)[1].strip()
    return build.processor().splitlines()[0]


@dataclass(frozen=True)
class LinearChoice:
    """The kernel each tree size runs, with what every kernel measured."""
    sizes: tuple[int, ...]                  # tree tokens of each measured forward, increasing
    paths: tuple[str, ...]                  # the kernel kept at each size (runtime.fast_linear.CHOICES)
    measured_ms: dict[str, tuple[float, ...]]  # every kernel's median forward ms at each size
    processor: str                          # processor_key() of the machine that measured it

    def path_for(self, rows: int) -> str:
        """The kernel for a forward of `rows` tokens: that of the largest measured size not above it."""
        chosen = self.paths[0]
        for size, path in zip(self.sizes, self.paths):
            if size > rows:
                break
            chosen = path
        return chosen

    def chosen_ms(self) -> list[float]:
        """The forward's cost at each size with the kernel kept there."""
        return [self.measured_ms[path][i] for i, path in enumerate(self.paths)]

    def ranges(self) -> list[tuple[int, int | None, str]]:
        """(first tokens, last tokens or None for no end, kernel) per run of sizes that keep one kernel."""
        runs: list[tuple[int, int | None, str]] = []
        for i, path in enumerate(self.paths):
            if runs and runs[-1][2] == path:
                continue
            if runs:
                runs[-1] = (runs[-1][0], self.sizes[i] - 1, runs[-1][2])
            runs.append((1 if i == 0 else self.sizes[i], None, path))
        return runs

    def explain(self) -> list[str]:
        """One line per run of sizes: the kernel and why (every other kernel's cost against it)."""
        lines = []
        for first, last, path in self.ranges():
            span = f"{first}+" if last is None else (f"{first}" if first == last else f"{first}-{last}")
            inside = [i for i, s in enumerate(self.sizes) if s >= first and (last is None or s <= last)]
            others = []
            for other in sorted(self.measured_ms):
                if other != path:
                    ratios = [self.measured_ms[other][i] / self.measured_ms[path][i] for i in inside]
                    others.append(f"{other} {min(ratios):.2f}-{max(ratios):.2f}x" if len(ratios) > 1 and
                                  round(min(ratios), 2) != round(max(ratios), 2) else f"{other} {ratios[0]:.2f}x")
            lines.append(f"{span} tokens: {path}" + (f" (the others cost {', '.join(others)} its time)" if others else ""))
        return lines

    def to_json(self) -> dict:
        return {"sizes": list(self.sizes), "paths": list(self.paths),
                "measured_ms": {k: list(v) for k, v in self.measured_ms.items()}, "processor": self.processor}

    @classmethod
    def from_json(cls, data: dict) -> "LinearChoice":
        sizes = tuple(int(s) for s in data["sizes"])
        paths = tuple(str(p) for p in data["paths"])
        measured = {str(k): tuple(float(x) for x in v) for k, v in data["measured_ms"].items()}
        if not sizes or len(paths) != len(sizes) or any(len(v) != len(sizes) for v in measured.values()) \
                or any(p not in measured for p in paths) or list(sizes) != sorted(set(sizes)):
            raise ValueError("an inconsistent linear-kernel choice")
        return cls(sizes, paths, measured, str(data["processor"]))


def choose(sizes: list[int], measured_ms: dict[str, list[float]], processor: str | None = None,
           margin: float = SWITCH_MARGIN) -> LinearChoice:
    """Per size the fastest kernel, except that a size keeps the kernel of the size below unless another
    saves at least `margin` of its cost there (a switch changes the last bits of the logits)."""
    if not measured_ms:
        raise ValueError("no kernel was measured")
    paths: list[str] = []
    for i in range(len(sizes)):
        fastest = min(measured_ms, key=lambda path: (measured_ms[path][i], path))
        if paths and fastest != paths[-1]:
            kept = measured_ms[paths[-1]][i]
            if measured_ms[fastest][i] > (1 - margin) * kept:
                fastest = paths[-1]
        paths.append(fastest)
    return LinearChoice(tuple(sizes), tuple(paths), {k: tuple(v) for k, v in measured_ms.items()},
                        processor or processor_key())


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[-80:]


def stored_path(model_key: str) -> Path:
    """Where the choice for a model key (LoadedModel.describe) on this processor lives."""
    return cache_root() / "linear-paths" / f"{_slug(model_key)}-{processor_key()}-r{REVISION}.json"


def load(model_key: str) -> LinearChoice | None:
    """The stored choice for this model key and processor, or None (none stored, unreadable, or measured on
    another processor: never trusted)."""
    path = stored_path(model_key)
    try:
        choice = LinearChoice.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return choice if choice.processor == processor_key() else None


def save(model_key: str, choice: LinearChoice) -> None:
    """Store the choice (a temporary file, then a rename: a reader never sees half of it)."""
    text = json.dumps(choice.to_json(), indent=1)
    write_atomically(stored_path(model_key), lambda staging: staging.write_text(text))
