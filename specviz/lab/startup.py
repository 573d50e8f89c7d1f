"""Start-up before the first visitor: the page serves the recorded replay at once while a background thread gets
the first live step ready: the model, the datastore, the native kernels, the warm copy-logit table (shipped in
assets/trained for the default model) and a quick cost curve, then the first tree steps through the app's model
function.
The page shows each stage as it goes (`Startup.markdown`, with a progress bar).

What the first step does not need comes after it, between visitors' calls (lab.call_activity) and only while
other processes leave the machine quiet (runtime.machine_load): the full cost curve with every linear kernel
timed, stored for later starts. Nothing is trained here: a model without a draft head drafts with the target's own
weights until someone trains one (`train-head`, or the Model box's button). On ZeroGPU the models are placed on cuda
on the main thread before the page is served (spaces moves them to the GPU inside each call) and everything that
runs the model happens in that first call."""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field

from specviz.errors import SpecvizError
from specviz.lab.fork_guard import GUARD
from specviz.runtime.compute_thread import COMPUTE

STARTED = time.monotonic()  # this module is imported as the app starts
# what the first live step waits for, in order (the progress bar counts them)
PLAN = ("loading the model", "reading READER's datastore", "building the native kernels",
        "reading the warm copy-logit table", "measuring a quick cost curve", "taking the first tree steps")
IDLE_BEFORE_S = 5.0        # background work starts once no visitor's call has run for this long
RETRY_BUSY_S = 60.0        # and tries again this long after finding the machine busy
MAX_TRIES = 30             # at most this many tries a process (then the next start measures again)


# what the start-up line says once live steps are ready (a page waiting for them reads it; its line before that,
# "Getting live steps ready", holds the word "ready" too)
READY_LINE = "Live steps are ready"


@dataclass
class Startup:
    stages: list[tuple[str, float]] = field(default_factory=list)   # (what, seconds since the process started)
    ready_s: float | None = None
    error: str | None = None
    current: str = "waiting to start"
    background: str | None = None   # what runs after the first step, between visitors' calls
    settled_s: float | None = None  # when no background work was left

    def mark(self, stage: str) -> None:
        self.stages.append((stage, round(time.monotonic() - STARTED, 2)))

    def begin(self, stage: str) -> None:
        self.current = stage

    @property
    def ready(self) -> bool:
        return self.ready_s is not None

    def progress(self) -> tuple[int, int]:
        """(stages of PLAN done, all of them)."""
        done = PLAN.index(self.current) if self.current in PLAN else (len(PLAN) if self.ready else 0)
        return done, len(PLAN)

    def markdown(self) -> str:
        if self.error:
            return f"⚠️ Live steps are not available: {self.error} The recorded runs still replay."
        if self.ready:
            line = f"✅ {READY_LINE} (the model warmed up {self.ready_s:.0f} s after start-up)."
            if self.background:
                line += (f" Between your steps this machine is still {self.background}; until then the planner "
                         "prices trees by a quick measurement.")
            return line
        # two lines at most, the last stage done only: the whole list wrapped to five lines at 1280x720 and pushed
        # the line below the first screen on a busy machine (the server's log has every stage's time)
        done, total = self.progress()
        elapsed = time.monotonic() - STARTED
        last = f"; done: {self.stages[-1][0]} ✓ {self.stages[-1][1]:.0f} s" if self.stages else ""
        return (f"⏳ Getting live steps ready: **{self.current}** (stage {done + 1} of {total}, {elapsed:.0f} s "
                f"so far{last}) <progress value=\"{done}\" max=\"{total}\" style=\"width:12em;vertical-align:middle\">"
                f"</progress>  \nA recorded run replays meanwhile; a Step pressed now waits for these stages (about "
                f"20 s from a cold start on 2 cores, a few warm).")


STATUS = Startup()


def place_models(names: list[str], mode: str = "") -> None:
    """ZeroGPU: load the allowed models on the main thread, where spaces intercepts the move to cuda (a model placed
    on the Space's CPUs loads there: runtime.placement)."""
    from specviz.runtime.shared_resources import shared_model

    for name in names:
        shared_model(name, mode)
    STATUS.mark("models placed")


def _prepare(model: str, zero_gpu: bool, status: Startup):
    """The warm-up's part in this process: the model, datastore and, where the model runs here, the kernels, warm
    table and a quick cost curve."""
    from specviz.drafters.copy_logit_seed import shared_copy_logit_seed
    from specviz.engine import costmodel
    from specviz.index import datastore
    from specviz.lab import head_training
    from specviz.runtime.native.build import build_all
    from specviz.runtime.shared_resources import shared_model

    status.begin(PLAN[0])
    if not zero_gpu:  # a cold cache compiles the kernels on the core the model's loading leaves free
        threading.Thread(target=build_all, daemon=True, name="specviz-kernel-builds").start()
    lm = shared_model(model)
    status.mark("model loaded")
    print(f"specviz: {lm.name} loaded on {lm.device}", flush=True)
    status.begin(PLAN[1])
    datastore.ensure(lm)     # tokenises the shipped corpus once per tokenizer (no model forward)
    datastore.shared_datastore(lm)
    status.mark("datastore ready")
    print(f"specviz: {head_training.status(lm).message}", flush=True)
    # these run the model: on ZeroGPU only inside a GPU call (the step below pays them), unless the model is
    # placed on the Space's CPUs (runtime.placement)
    if not zero_gpu or lm.device.type == "cpu":
        status.begin(PLAN[2])
        backend = lm.forward_backend()
        status.mark(f"kernels ready ({backend})")
        status.begin(PLAN[3])
        shared_copy_logit_seed(lm)
        status.mark("warm table ready")
        status.begin(PLAN[4])
        cost = costmodel.quick_curve(lm)
        status.mark("cost curve stored earlier" if costmodel.settled(lm) else
                    f"quick cost curve ({len(cost.sizes)} sizes)")
    return lm


def take_first_steps(model: str, prompt: str, method: str, zero_gpu: bool = False) -> None:
    """The first tree steps through lab.model_calls, as a visitor's would go: past a measured choice's first tries,
    which the process's sessions share. Otherwise the first visitor's Run paid them, with the draft head's first call
    (unified's first Run: 23 + 4.6 ms of its first two steps' drafting, later Runs' 0.04; docs/benchmarks.md, "Issue
    70: the reply's first step"). On ZeroGPU each step is a GPU call of its own: one step there."""
    from specviz.engine.run import WARMUP_STEPS
    from specviz.lab.lab import Lab
    from specviz.tree.budget import AUTO_BUDGET

    lab = Lab()
    lab.choose_values(model, prompt, method, AUTO_BUDGET, {})
    for _ in range(1 if zero_gpu else WARMUP_STEPS):
        lab.step(64)  # room for eight steps on a prompt the drafts copy


def warm_up(model: str, prompt: str, method: str, zero_gpu: bool = False, status: Startup = STATUS) -> None:
    """Everything the first live step would otherwise pay for, then the first tree steps through lab.model_calls; then
    the work the first step did not need (settle)."""
    from specviz.engine import costmodel

    if not zero_gpu:  # a model or mode loaded later is measured the same way, between visitors' calls
        costmodel.measure_later_with(settle_later)
    try:
        with GUARD.computing():  # no ZeroGPU worker forked while this thread loads or computes (lab.fork_guard)
            lm = COMPUTE.run(_prepare, model, zero_gpu, status)  # on the thread every step runs on
        status.begin(PLAN[5])
        take_first_steps(model, prompt, method, zero_gpu)
        status.mark("first tree steps taken")
        status.ready_s = round(time.monotonic() - STARTED, 2)
        print(f"specviz: {lm.name} on {lm.device}: live steps ready {status.ready_s:.1f} s after start "
              f"({', '.join(f'{name} {at:.1f} s' for name, at in status.stages)})", flush=True)
    except Exception as error:  # noqa: BLE001 (any failure reaches the page as a message, never a spinner)
        status.error = str(error) if isinstance(error, SpecvizError) else f"{type(error).__name__}: {error}"
        status.current = "failed"
        traceback.print_exc()
        print(f"specviz: warm-up failed: {status.error}", flush=True)
        return
    if not zero_gpu or lm.device.type == "cpu":
        settle(lm, status)


def settle(lm, status: Startup = STATUS, idle_before_s: float = IDLE_BEFORE_S, retry_s: float = RETRY_BUSY_S,
           tries: int = MAX_TRIES) -> None:
    """The full cost curve (every linear kernel timed at every size), measured only between visitors' calls
    (it stops before its next forward when one starts, and starts again later) and stored only when other
    processes left the machine quiet; tried again later otherwise, at most `tries` times on a busy machine."""
    from specviz.engine import costmodel
    from specviz.lab.call_activity import ACTIVITY
    from specviz.runtime.machine_load import sample

    if costmodel.settled(lm):
        status.settled_s = round(time.monotonic() - STARTED, 2)
        print(f"specviz: nothing left in the background {status.settled_s:.1f} s after start (the cost curve was "
              "stored earlier)", flush=True)
        return
    status.background = "measuring the full cost curve"
    busy_tries = 0
    try:
        while busy_tries < tries:
            while ACTIVITY.idle_s() < idle_before_s:
                time.sleep(1.0)
            load = sample(1.0)
            if not load.quiet:
                busy_tries += 1
                print(f"specviz: the full cost curve waits: {load.why_busy()}", flush=True)
                time.sleep(retry_s)
                continue
            with GUARD.computing():
                cost = COMPUTE.run(costmodel.recalibrate, lm, lambda: ACTIVITY.busy)
            if cost is None:
                continue  # a visitor's call came: it went first, and this starts again once they are idle
            if cost.busy is None:
                status.mark("full cost curve stored")
                print(f"specviz: full cost curve stored ({costmodel.stored_path(lm).name}); nothing left in the "
                      f"background {time.monotonic() - STARTED:.1f} s after start", flush=True)
                break
            busy_tries += 1
            print(f"specviz: the full cost curve was not stored ({cost.busy}); trying again later", flush=True)
            time.sleep(retry_s)
    except Exception as error:  # noqa: BLE001 (the quick curve still serves; the log says why)
        print(f"specviz: the full cost curve failed ({type(error).__name__}: {error}); the quick one serves",
              flush=True)
    finally:
        status.background = None
        status.settled_s = round(time.monotonic() - STARTED, 2)


_settling: set = set()                 # the models (by shared key) whose full curve a background thread measures
_settling_lock = threading.Lock()


def settle_later(lm) -> None:
    """A session found no stored curve for lm (a mode or model loaded after start-up): it plans on the quick curve,
    and the full one is measured here, between visitors' calls, once per model copy (engine.costmodel.for_session)."""
    key = lm.shared_key or id(lm)
    with _settling_lock:
        if key in _settling:
            return
        _settling.add(key)
    threading.Thread(target=settle, args=(lm, Startup()), daemon=True, name="specviz-curve").start()


def start_in_background(model: str, prompt: str, method: str, zero_gpu: bool = False) -> threading.Thread:
    thread = threading.Thread(target=warm_up, args=(model, prompt, method, zero_gpu), daemon=True,
                              name="specviz-warm-up")
    thread.start()
    return thread
