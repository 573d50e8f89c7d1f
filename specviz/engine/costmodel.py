"""Measured verify cost: how long one target forward takes for q tree tokens on this machine and model."""

from __future__ import annotations

import bisect
import json
import re
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from specviz.runtime.kv import new_cache

from specviz.runtime.cache_dir import cache_root
from specviz.runtime.loaded_model import LoadedModel
from specviz.tree.draft_tree import DraftTree
from specviz.engine.tree_forward import tree_forward

CALIBRATION_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)


@dataclass
class CostModel:
    sizes: list[int]          # tree tokens in one forward (root included)
    ms: list[float]           # median milliseconds of that forward
    context_len: int          # cache length it was measured on
    model: str
    device: str
    dtype: str
    threads: int

    def cost_ms(self, q: int) -> float:
        """Interpolated cost of a forward over q tokens; linear extrapolation past the last size. np.interp's
        arithmetic in plain Python (asked twice a step, and np.interp on lists costs ~20 us from cold caches)."""
        sizes, ms = self.sizes, self.ms
        if q <= sizes[0]:
            return float(ms[0])
        if q <= sizes[-1]:
            upper = bisect.bisect_left(sizes, q)
            if sizes[upper] == q:
                return float(ms[upper])
            lower = upper - 1
            slope = (ms[upper] - ms[lower]) / (sizes[upper] - sizes[lower])
            return float(slope * (q - sizes[lower]) + ms[lower])
        slope = (ms[-1] - ms[-2]) / (sizes[-1] - sizes[-2])
        return ms[-1] + slope * (q - sizes[-1])

    def costs_ms(self, largest: int) -> np.ndarray:
        """cost_ms(q) for q = 1..largest in one call (index q - 1)."""
        q = np.arange(1, largest + 1, dtype=np.float64)
        costs = np.interp(q, self.sizes, self.ms)
        beyond = q > self.sizes[-1]
        if beyond.any():
            slope = (self.ms[-1] - self.ms[-2]) / (self.sizes[-1] - self.sizes[-2])
            costs[beyond] = self.ms[-1] + slope * (q[beyond] - self.sizes[-1])
        return costs

    def relative(self, q: int) -> float:
        """Cost of q tokens in units of a one-token step."""
        return self.cost_ms(q) / self.ms[0]

    def table(self) -> str:
        lines = [f"verify cost on {self.model} ({self.device}, {self.dtype}, {self.threads} threads, "
                 f"cache of {self.context_len} tokens)", "  tokens      ms   x one-token"]
        for q, ms in zip(self.sizes, self.ms):
            lines.append(f"  {q:6d} {ms:8.1f} {ms / self.ms[0]:8.2f}")
        return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[-80:]


# bumped whenever the engine's forward changes cost, so no stale curve is read (2: packed oneDNN weights,
# 3: native tree attention, 4: native norms, rotary and activation, 5: aligned six-row attention blocks,
# 6: the whole lean forward in one native call, keys kept transposed)
FORWARD_REVISION = 6


def stored_path(lm: LoadedModel) -> Path:
    """One curve per everything that moves it (LoadedModel.describe: device, mode, kernel, forward backend,
    threads) and per revision of the forward."""
    return cache_root() / "costs" / f"{_slug(lm.describe())}-r{FORWARD_REVISION}.json"


# a bigger tree never costs much less than a smaller one (measured here: at most about 5% less, where a
# one-row product takes a slower path than a few rows); a curve that says otherwise was measured while
# something else ran, and is measured again rather than trusted
PLAUSIBLE_DROP = 0.85
CALIBRATION_ATTEMPTS = 3


def plausible(ms: list[float]) -> bool:
    """Whether a curve's times could all be this machine's own: positive, and no size below PLAUSIBLE_DROP
    times the cost of a smaller one."""
    return all(t > 0 for t in ms) and all(later >= PLAUSIBLE_DROP * max(ms[:i]) for i, later in enumerate(ms) if i)


def load(lm: LoadedModel) -> CostModel | None:
    path = stored_path(lm)
    if not path.is_file():
        return None
    try:
        cost = CostModel(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None  # an unreadable file is recalibrated, never trusted
    return cost if plausible(cost.ms) else None  # so is one measured during a burst of load (older versions)


def _measure(lm: LoadedModel, sizes, context_len: int, repeats: int) -> list[float]:
    """Median time of a tree forward (a chain of q tokens) per size, on a cache of context_len tokens. The
    sizes take turns (each round times each size once), so a burst of load in the middle lands in one
    round of every size, and the medians leave it out, instead of spoiling every repeat of a few sizes."""
    model = lm.model
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(100, lm.vocab_size - 1, (context_len,), generator=generator).tolist()
    cache = new_cache(model.config)
    with torch.inference_mode():
        model(input_ids=torch.tensor([context], device=lm.device), past_key_values=cache, use_cache=True)
    trees = []
    for q in sizes:
        tree = DraftTree(context[-1])
        tree.add_path(context[:q - 1], "retrieval")
        trees.append(tree)
    times: list[list[float]] = [[] for _ in sizes]
    for round_ in range(repeats + 1):  # the first round warms every shape up
        for tree, kept in zip(trees, times):
            started = time.perf_counter()
            tree_forward(lm, cache, tree, context_len)
            if lm.device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = (time.perf_counter() - started) * 1000
            cache.crop(-len(tree))
            if round_:
                kept.append(elapsed)
    return [round(statistics.median(kept), 3) for kept in times]


def calibrate(lm: LoadedModel, sizes=CALIBRATION_SIZES, context_len: int = 512, repeats: int = 5,
              save: bool = True, attempts: int = CALIBRATION_ATTEMPTS) -> CostModel:
    """The verify cost curve, measured (see _measure) until it is plausible, at most `attempts` times. A
    curve still implausible after that is used but not saved: the next session measures again."""
    for _ in range(attempts):
        medians = _measure(lm, sizes, context_len, repeats)
        if plausible(medians):
            break
    cost = CostModel(sizes=list(sizes), ms=medians, context_len=context_len, model=lm.name,
                     device=lm.device.type, dtype=str(lm.dtype).replace("torch.", ""),
                     threads=torch.get_num_threads())
    if save and plausible(medians):
        path = stored_path(lm)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(cost), indent=1))
    return cost


def load_or_calibrate(lm: LoadedModel) -> CostModel:
    return load(lm) or calibrate(lm)
