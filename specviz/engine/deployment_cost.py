"""The cost of verifying N tokens where a drafter will be served: a deployment's cost curve.

specviz plans on this machine's curve (engine.costmodel); a serving engine's knobs must be chosen on the costs of the
machine and engine that will run them (on a GPU a forward of 64 tokens costs nearly what one does; on a 2-core CPU
several times as much). A curve is a JSON file:

    {"name": "...", "model": "smollm2-135m-instruct", "engine": "specviz|llama.cpp|vllm|...", "device": "...",
     "dtype": "fp32|bf16|gguf|...", "sizes": [1, 2, 4, ...], "ms": [...],
     "draft_level_ms": 0.8 (optional: one drafter level there), "provenance": {"date": "...", "command": "...", ...}}

sizes ascending from 1 (the one-token forward every speedup is taken against), ms positive, one per size.
`calibrate --json OUT` writes one from this machine's measurement; `shipped()` are the ones under assets/costs,
each named with where and how it was measured."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from specviz.engine.costmodel import CostModel
from specviz.errors import SpecvizError

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "costs"
THIS_MACHINE = "this machine"   # the name of the curve measured here (the planner's own)
MAX_SIZES = 64                  # entries a file may list (it names sizes up to 1,024)


@dataclass(frozen=True)
class DeploymentCost:
    """A deployment's verify cost: ms per tree size, where and how it was measured."""
    name: str
    model: str
    engine: str
    device: str
    dtype: str
    sizes: tuple[int, ...]
    ms: tuple[float, ...]
    draft_level_ms: float | None = None   # one drafter level on that deployment (None: not measured there)
    provenance: dict = field(default_factory=dict, compare=False)

    def cost_ms(self, tokens: int) -> float:
        """Interpolated between the listed sizes, linear past the last."""
        return self.curve.cost_ms(tokens)

    @property
    def curve(self) -> CostModel:
        return CostModel(sizes=list(self.sizes), ms=list(self.ms), context_len=0, model=self.model,
                         device=self.device, dtype=self.dtype, threads=0)

    def level_ms(self, measured_here: float, here: "DeploymentCost | CostModel") -> float:
        """A drafter level's cost there: its own figure where the file gives one, else the level measured here
        scaled by the two one-token forwards (a guess that says so: level_note)."""
        if self.draft_level_ms is not None:
            return self.draft_level_ms
        return measured_here * self.cost_ms(1) / here.cost_ms(1)

    def level_note(self) -> str | None:
        if self.draft_level_ms is not None:
            return None
        return (f"{self.name} gives no drafter level's cost: the level measured here is scaled by the two one-token "
                "forwards")

    def label(self) -> str:
        """Whose curve it is, as every predicted speedup names it."""
        when = self.provenance.get("date")
        return f"{self.name} ({self.engine}, {self.device}, {self.dtype}" + (f", {when})" if when else ")")

    def to_dict(self) -> dict:
        data = {"name": self.name, "model": self.model, "engine": self.engine, "device": self.device,
                "dtype": self.dtype, "sizes": list(self.sizes), "ms": list(self.ms)}
        if self.draft_level_ms is not None:
            data["draft_level_ms"] = self.draft_level_ms
        data["provenance"] = dict(self.provenance)
        return data


def _text(data: dict, key: str, source: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise SpecvizError(f"{source}: \"{key}\" must be a non-empty text of at most 200 characters.")
    return value.strip()


def parse(data, source: str = "the cost file") -> DeploymentCost:
    """A DeploymentCost from a file's JSON object; SpecvizError naming what is wrong."""
    if not isinstance(data, dict):
        raise SpecvizError(f"{source} must hold a JSON object (see engine/deployment_cost.py for its fields).")
    unknown = sorted(set(data) - {"name", "model", "engine", "device", "dtype", "sizes", "ms", "draft_level_ms",
                                  "provenance"})
    if unknown:
        raise SpecvizError(f"{source}: unknown field(s) {', '.join(unknown)}.")
    sizes, ms = data.get("sizes"), data.get("ms")
    if not isinstance(sizes, list) or not isinstance(ms, list) or not 1 <= len(sizes) <= MAX_SIZES \
            or len(sizes) != len(ms):
        raise SpecvizError(f"{source}: \"sizes\" and \"ms\" must be lists of the same length (1 to {MAX_SIZES}).")
    if not all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 1024 for s in sizes) or sizes[0] != 1 \
            or any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise SpecvizError(f"{source}: \"sizes\" must be whole numbers ascending from 1 (at most 1024).")
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and 0 < t < 1e6
               for t in ms):
        raise SpecvizError(f"{source}: \"ms\" must be positive milliseconds.")
    level = data.get("draft_level_ms")
    if level is not None and not (isinstance(level, (int, float)) and not isinstance(level, bool)
                                  and math.isfinite(level) and 0 <= level < 1e6):
        raise SpecvizError(f"{source}: \"draft_level_ms\" must be a non-negative number of milliseconds.")
    provenance = data.get("provenance", {})
    if not isinstance(provenance, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                                   for k, v in provenance.items()) or len(provenance) > 32:
        raise SpecvizError(f"{source}: \"provenance\" must be an object of at most 32 texts or numbers.")
    return DeploymentCost(_text(data, "name", source), _text(data, "model", source), _text(data, "engine", source),
                          _text(data, "device", source), _text(data, "dtype", source), tuple(sizes),
                          tuple(float(t) for t in ms), float(level) if level is not None else None, provenance)


def load(path: Path | str) -> DeploymentCost:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise SpecvizError(f"The cost file {path.name} could not be read ({type(error).__name__}).") from None
    except json.JSONDecodeError as error:
        raise SpecvizError(f"The cost file {path.name} is not JSON: {error.msg} at line {error.lineno}.") from None
    return parse(data, f"the cost file {path.name}")


def measured_folder() -> Path:
    """Where curves measured on this machine by another engine are kept (benches.llamacpp.cost_curve writes one)."""
    from specviz.runtime.cache_dir import cache_root

    return cache_root() / "costs" / "deployments"


def shipped(model: str | None = None) -> dict[str, DeploymentCost]:
    """The curves shipped in assets/costs, then those measured here by other engines (for a model, or all), by
    name. A measured file that cannot be read is left out (it is made again by its command)."""
    found = {}
    for path in [*sorted(SHIPPED.glob("*.json")), *sorted(measured_folder().glob("*.json"))]:
        try:
            cost = load(path)
        except SpecvizError:
            if path.parent == SHIPPED:
                raise
            continue
        if model is None or cost.model == model:
            found[cost.name] = cost
    return found


def of_this_machine(curve: CostModel, draft_level_ms: float | None = None, **provenance) -> DeploymentCost:
    """This machine's measured curve as a deployment's (what `calibrate --json` writes, the planner's own)."""
    return DeploymentCost(THIS_MACHINE, curve.model, "specviz", curve.device, curve.dtype, tuple(curve.sizes),
                          tuple(curve.ms), draft_level_ms, provenance)
