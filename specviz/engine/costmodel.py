"""Measured verify cost: how long one target forward takes for q tree tokens on this machine and model."""

from __future__ import annotations

import os

import bisect
import contextlib
import json
import re
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from specviz.runtime.cache_files import write_atomically
from specviz.runtime.block_forward import causal_forward

from specviz.runtime import fast_linear, linear_paths, loaded_model
from specviz.runtime.cache_dir import cache_root
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.machine_load import LoadWatch, MachineLoad, sample
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
    paths: list[str] | None = None  # the linear kernel each size ran (runtime.linear_paths); None: the model's own
    path_ms: dict[str, list[float]] = field(default_factory=dict)  # every kernel timed, ms at each size
    processor: str = ""             # runtime.linear_paths.processor_key() of the machine that measured it
    busy: str | None = None         # why it was not stored (why_busy: measured while the machine was busy)
    machine_load: MachineLoad | None = None  # how quiet the machine was while it was measured

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
        others = sorted(self.path_ms)
        lines = [f"verify cost on {self.model} ({self.device}, {self.dtype}, {self.threads} threads, "
                 f"cache of {self.context_len} tokens)",
                 "  tokens      ms   x one-token" + ("   linear kernel" + "".join(f" {k + ' ms':>11}" for k in others)
                                                    if self.paths else "")]
        for i, (q, ms) in enumerate(zip(self.sizes, self.ms)):
            row = f"  {q:6d} {ms:8.1f} {ms / self.ms[0]:8.2f}"
            if self.paths:
                row += f"   {self.paths[i]:>13}" + "".join(f" {self.path_ms[k][i]:11.1f}" for k in others)
            lines.append(row)
        return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[-80:]


# bumped whenever the engine's forward changes cost, so no stale curve is read (2: packed oneDNN weights,
# 3: native tree attention, 4: native norms, rotary and activation, 5: aligned six-row attention blocks,
# 6: the whole lean forward in one native call, keys kept transposed, 7: the linear kernel's blocks by row count,
# 8: the kernels built with -ffp-contract=off, attention's multiply-adds explicit)
FORWARD_REVISION = 8


def stored_path(lm: LoadedModel) -> Path:
    """One curve per everything that moves it (LoadedModel.describe: device, mode, kernel, forward backend,
    threads), per processor (its model name and feature flags) and per revision of the forward."""
    return cache_root() / "costs" / f"{_slug(lm.describe())}-{linear_paths.processor_key()}-r{FORWARD_REVISION}.json"


# a bigger tree never costs much less than a smaller one (measured here: at most about 5% less, where a
# one-row product takes a slower path than a few rows); a curve that says otherwise was measured while
# something else ran, and is measured again rather than trusted
PLAUSIBLE_DROP = 0.85
CALIBRATION_ATTEMPTS = 3
# a quiet machine's repeats of one forward lie within a few percent of each other (their median relative
# spread, (slowest - fastest) / median over the sizes, was 0.02-0.08 here); a curve whose repeats spread more
# than this was measured while something else ran
NOISY_SPREAD = 0.35
# a one-token forward of a weight-bound model costs about one read of its weights; this many times that
# estimate means the cores or the memory were busy elsewhere (measured here: 1.0-1.4x)
WEIGHT_READ_FACTOR = 4.0
# the others' use of the machine is sampled this long before a calibration that may be stored
QUIET_SAMPLE_S = 0.5
# after the first timed round a linear kernel this much dearer than the best at every size is timed no more
DROP_SLOWER = 1.5


def plausible(ms: list[float]) -> bool:
    """Whether a curve's times could all be this machine's own: positive, and no size below PLAUSIBLE_DROP
    times the cost of a smaller one."""
    return all(t > 0 for t in ms) and all(later >= PLAUSIBLE_DROP * max(ms[:i]) for i, later in enumerate(ms) if i)


def load(lm: LoadedModel) -> CostModel | None:
    """The stored curve, where it was measured on this processor with the linear kernels this model now runs
    at each size; None otherwise (it is measured again, never trusted)."""
    path = stored_path(lm)
    if not path.is_file():
        return None
    try:
        fields = json.loads(path.read_text())
        fields["machine_load"] = MachineLoad(**fields["machine_load"])
        cost = CostModel(**fields)
    except (ValueError, TypeError, KeyError):
        return None  # an unreadable file is recalibrated, never trusted; so is one that says not how quiet it was
    if cost.busy is not None or not cost.machine_load.quiet:
        return None
    if not plausible(cost.ms):  # so is one measured during a burst of load (older versions)
        return None
    if cost.processor != linear_paths.processor_key():
        return None
    kernels = [lm.linear_path_for(q) for q in cost.sizes]
    return cost if (cost.paths or [lm.linear] * len(cost.sizes)) == kernels else None


def _measure(lm: LoadedModel, sizes, context_len: int, repeats: int, kernels: list[str | None] = (None,),
             stop: Callable[[], bool] | None = None) -> dict[str | None, list[list[float]]] | None:
    """Every timed forward (ms) per linear kernel and size: a tree forward (a chain of q tokens) on a cache of
    context_len tokens, with each kernel of `kernels` forced (None: as the model runs now). Sizes and kernels
    take turns (each round times each pair once), so a burst of load in the middle lands in one round of every
    pair, and the medians leave it out, instead of spoiling every repeat of a few. After the first timed round
    a kernel dearer than DROP_SLOWER x the best at every size is timed no more (it keeps that round). None
    where stop() said so before a forward (a visitor's call came: it goes first)."""
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(100, lm.vocab_size - 1, (context_len,), generator=generator).tolist()
    cache = lm.new_cache()  # the static cache where verify forwards are captured: the curve prices that path
    causal_forward(lm, cache, context)
    trees = []
    for q in sizes:
        tree = DraftTree(context[-1])
        tree.add_path(context[:q - 1], "retrieval")
        trees.append(tree)
    times: dict[str | None, list[list[float]]] = {k: [[] for _ in sizes] for k in kernels}
    timed = list(kernels)
    for round_ in range(repeats + 1):  # the first round warms every shape up
        for i, tree in enumerate(trees):
            for kernel in timed:
                if stop is not None and stop():
                    return None
                with lm.decoder.forcing(kernel) if kernel is not None else contextlib.nullcontext():
                    started = time.perf_counter()
                    tree_forward(lm, cache, tree, context_len)
                    if lm.device.type == "cuda":
                        torch.cuda.synchronize()
                    elapsed = (time.perf_counter() - started) * 1000
                cache.crop(-len(tree))
                if round_:
                    times[kernel][i].append(elapsed)
        if round_ == 1 and len(timed) > 1:
            best = [min(times[k][i][0] for k in timed) for i in range(len(sizes))]
            timed = [k for k in timed if any(times[k][i][0] < DROP_SLOWER * best[i] for i in range(len(sizes)))]
    return times


def spread(times: list[float]) -> float:
    """(slowest - fastest) / median of one size's repeats: a few percent on a quiet machine."""
    return (max(times) - min(times)) / statistics.median(times) if len(times) > 1 else 0.0


_bandwidth: dict[str, float] = {}


def weight_read_ms(lm: LoadedModel) -> float | None:
    """What reading the model's linear weights once costs here: their bytes over this machine's read
    bandwidth (a sum over 256 MB, best of three, measured once a process). None off the CPU, and for weights
    that fit in the caches (under loaded_model.MEASURED_FROM_BYTES), where a forward is not bound by reading them."""
    weight_bytes = fast_linear.linear_weight_bytes(lm.model)
    if lm.device.type != "cpu" or weight_bytes < loaded_model.MEASURED_FROM_BYTES:
        return None
    if "cpu" not in _bandwidth:
        buffer = torch.ones(64 * 2**20)
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            buffer.sum()
            best = min(best, time.perf_counter() - started)
        _bandwidth["cpu"] = buffer.numel() * 4 / best
    return weight_bytes / _bandwidth["cpu"] * 1000


def why_busy(lm: LoadedModel, times: dict[str | None, list[list[float]]], ms: list[float],
             loads: tuple[MachineLoad, ...] = ()) -> str | None:
    """Why a measured curve cannot be this machine's own (None: it can): other processes busy before or while
    it was measured (loads: runtime.machine_load), a bigger tree much cheaper than a smaller one, repeats
    spread far beyond a quiet machine's, or a one-token forward far dearer than reading the weights once."""
    for load in loads:
        if load.why_busy() is not None:
            return load.why_busy()
    if not plausible(ms):
        return "a bigger tree measured much cheaper than a smaller one"
    spreads = [spread(t) for per_size in times.values() for t in per_size if len(t) > 1]
    if spreads and statistics.median(spreads) > NOISY_SPREAD:
        return f"its repeats spread {statistics.median(spreads):.0%} (a quiet machine: a few percent)"
    estimate = weight_read_ms(lm)
    if estimate is not None and ms[0] > WEIGHT_READ_FACTOR * estimate:
        return (f"a one-token forward took {ms[0]:.1f} ms, {ms[0] / estimate:.1f}x reading the weights once "
                f"({estimate:.1f} ms)")
    return None


def calibrate(lm: LoadedModel, sizes=CALIBRATION_SIZES, context_len: int = 512, repeats: int = 5,
              save: bool = True, attempts: int = CALIBRATION_ATTEMPTS, every_kernel: bool = True,
              stop: Callable[[], bool] | None = None) -> CostModel | None:
    """The verify cost curve, measured (see _measure) until it is plausible (why_busy), at most `attempts`
    times. Where the model can run several linear kernels (LoadedModel.linear_candidates) each is timed and
    the fastest per size kept (runtime.linear_paths.choose): the choice is stored and applied to the model,
    and the curve is its cost.
    A curve still implausible after that, or measured while other processes used the machine (before or
    during: runtime.machine_load), is used but not saved (nor its choice): a later calibration measures again.
    every_kernel=False times the model's own kernel alone (the quick curve a first step needs). None where
    stop() ended it early (checked before each forward)."""
    kernels = lm.linear_candidates() if lm.measures_linear_paths() and every_kernel else [None]
    for _ in range(attempts):
        before = sample(QUIET_SAMPLE_S) if save else None
        with LoadWatch() as watch:
            times = _measure(lm, sizes, context_len, repeats, kernels, stop)
        if times is None:
            return None
        medians = {k: [round(statistics.median(t), 3) for t in per_size] for k, per_size in times.items()}
        choice = linear_paths.choose(list(sizes), medians) if kernels != [None] else None
        ms = choice.chosen_ms() if choice is not None else medians[None]
        loads = tuple(load for load in (before, watch.result) if load is not None)
        busy = why_busy(lm, times, ms, loads)
        if busy is None or any(not load.quiet for load in loads):
            break  # quiet and plausible; or others are busy, and measuring again now would not help
    if choice is not None and busy is not None:  # a choice made under load is noise: the model keeps its kernel
        choice, ms = None, medians[kernels[0]]
    if choice is not None:
        lm.apply_linear_choice(choice)
        if save:
            linear_paths.save(lm.describe(), choice)
    cost = CostModel(sizes=list(sizes), ms=list(ms), context_len=context_len, model=lm.name,
                     device=lm.device.type, dtype=str(lm.dtype).replace("torch.", ""),
                     threads=torch.get_num_threads(), paths=list(choice.paths) if choice else None,
                     path_ms={k: list(v) for k, v in medians.items()} if choice else {},
                     processor=linear_paths.processor_key(), busy=busy,
                     machine_load=max(loads, key=lambda load: load.others_cores))  # the busier of the two
    if save and busy is None:
        text = json.dumps(asdict(cost), indent=1)  # whole or not at all: a reader never sees half a curve
        write_atomically(stored_path(lm), lambda staging: staging.write_text(text))
    return cost


# the sizes of the quick curve a first step is planned with (about a second; the full calibration comes later)
QUICK_SIZES = (1, 4, 16, 64)
_process_curves: dict[Path, CostModel] = {}   # per stored_path: what this process measured and did not store
_measuring = threading.Lock()                 # one calibration at a time (two would time each other)


def _stored_or_measured(lm: LoadedModel, measure: Callable[[], CostModel]) -> CostModel:
    """The stored curve, else the one this process measured already, else measure() now (kept for this process)."""
    stored = load(lm)
    if stored is not None:
        return stored
    with _measuring:
        key = stored_path(lm)
        if key not in _process_curves:
            _process_curves[key] = measure()
        return _process_curves[key]


# SPECVIZ_FIRST_CURVE=quick: where no curve is stored, plan on the quick curve instead of calibrating for minutes
# (never stored). The test suite sets it: its runs check tokens, not speed, and a cold cache would otherwise pay
# a full calibration per thread count inside whichever test comes first; the tests of calibration unset it.
FIRST_CURVE_VARIABLE = "SPECVIZ_FIRST_CURVE"


def _quick_first() -> bool:
    return os.environ.get(FIRST_CURVE_VARIABLE, "").strip().lower() == "quick"


def load_or_calibrate(lm: LoadedModel) -> CostModel:
    """The stored curve; else the one this process measured already (quick, or measured under load); else a
    full calibration now (stored where the machine was quiet), or the quick curve under SPECVIZ_FIRST_CURVE."""
    if _quick_first():
        return quick_curve(lm)
    return _stored_or_measured(lm, lambda: calibrate(lm))


def quick_curve(lm: LoadedModel) -> CostModel:
    """The stored curve, else one good enough for a first step: the model's own kernel at QUICK_SIZES, two
    repeats (about a second of forwards on a 2-core CPU), never stored; this process plans with it until
    recalibrate() stores a full one."""
    return _stored_or_measured(lm, lambda: calibrate(lm, QUICK_SIZES, repeats=2, save=False, attempts=1,
                                                     every_kernel=False))


# where a curve is missing: measure the full one later, between visitors' calls (the app registers how: its
# start-up's settle); None measures it at once (the command line, whose runs are measurements themselves)
_measure_later: list[Callable[[LoadedModel], None] | None] = [None]


def measure_later_with(schedule: Callable[[LoadedModel], None] | None) -> None:
    """How a session that finds no curve gets the full one: schedule(lm) measures it later (None: at once)."""
    _measure_later[0] = schedule


def for_session(lm: LoadedModel) -> CostModel:
    """The curve a new session plans with: the stored one, else this process's; else, where the app measures curves
    in the background, the quick curve now (about a second) with the full one scheduled, so a visitor's first step
    in a mode or model not measured yet never carries a calibration of minutes; else the full one now."""
    found = known_curve(lm)
    if found is not None:
        return found
    schedule = _measure_later[0]
    if schedule is None:
        return load_or_calibrate(lm)
    curve = quick_curve(lm)
    schedule(lm)
    return curve


def settled(lm: LoadedModel) -> bool:
    """Whether this machine has a stored curve for lm (measured on a quiet machine)."""
    return load(lm) is not None


def recalibrate(lm: LoadedModel, stop: Callable[[], bool] | None = None) -> CostModel | None:
    """A full calibration now, stored where the machine was quiet (then every later session reads it); this
    process plans with it either way. None where stop() ended it (nothing changes)."""
    with _measuring:
        cost = calibrate(lm, stop=stop)
        if cost is not None and (cost.busy is None or stored_path(lm) not in _process_curves):
            _process_curves[stored_path(lm)] = cost  # one measured under load never replaces a quiet one
        return cost


def known_curve(lm: LoadedModel) -> CostModel | None:
    """The stored curve, else the one this process measured; None where there is neither (measures nothing)."""
    return load(lm) or _process_curves.get(stored_path(lm))
