"""Start-up before the first visitor: the page serves the recorded replay at once while a background thread loads
the model, builds the native kernels, reads the datastore, the warm copy-logit table and the cost curve (each
built and stored on first use), and takes one tree step through the app's model function; the page says when live
steps are ready. When the model has no draft head yet, its training starts in a child process (ui.head_training;
the page says how it goes). On ZeroGPU the models are placed on cuda on the main thread before the page is served
(spaces moves them to the GPU inside each call) and everything that runs the model happens in that first call."""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field

from specviz.errors import SpecvizError
from specviz.lab.fork_guard import GUARD

STARTED = time.monotonic()  # this module is imported as the app starts


@dataclass
class Startup:
    stages: list[tuple[str, float]] = field(default_factory=list)   # (what, seconds since the process started)
    ready_s: float | None = None
    error: str | None = None
    current: str = "waiting to start"

    def mark(self, stage: str) -> None:
        self.stages.append((stage, round(time.monotonic() - STARTED, 2)))

    @property
    def ready(self) -> bool:
        return self.ready_s is not None

    def markdown(self) -> str:
        if self.error:
            return f"⚠️ Live steps are not available: {self.error} The recorded runs still replay."
        if self.ready:
            return f"✅ Live steps are ready (the model warmed up {self.ready_s:.0f} s after start-up)."
        return (f"⏳ Getting live steps ready ({self.current}); meanwhile a recorded run replays: Step or Run waits "
                "for the model.")


STATUS = Startup()


def place_models(names: list[str], mode: str = "") -> None:
    """ZeroGPU: load the allowed models on the main thread, where spaces intercepts the move to cuda (a model placed
    on the Space's CPUs loads there: runtime.placement)."""
    from specviz.runtime.shared_resources import shared_model

    for name in names:
        shared_model(name, mode)
    STATUS.mark("models placed")


def _prepare(model: str, zero_gpu: bool, status: Startup):
    """The warm-up's part in this process: the model, datastore, head check and, where the model runs here, the
    kernels, warm table and cost curve."""
    from specviz.engine import costmodel
    from specviz.drafters.copy_logit_seed import shared_copy_logit_seed
    from specviz.index import datastore
    from specviz.runtime.shared_resources import shared_model
    from specviz.lab import head_training

    status.current = "loading the model"
    lm = shared_model(model)
    status.mark("model loaded")
    print(f"specviz: {lm.name} loaded on {lm.device}", flush=True)
    status.current = "reading READER's datastore"
    datastore.ensure(lm)     # tokenises the shipped corpus once per tokenizer (no model forward)
    datastore.shared_datastore(lm)
    status.mark("datastore ready")
    training = head_training.start_if_missing(lm)  # the draft head, once per model, in a child process
    status.mark(f"draft head {training.state.value}")
    print(f"specviz: {training.message}", flush=True)
    # these run the model: on ZeroGPU only inside a GPU call (the step below pays them), unless the model is
    # placed on the Space's CPUs (runtime.placement)
    if not zero_gpu or lm.device.type == "cpu":
        status.current = "building the native kernels"
        backend = lm.forward_backend()
        status.mark(f"kernels ready ({backend})")
        status.current = "filling the warm copy-logit table"
        shared_copy_logit_seed(lm)
        status.mark("warm table ready")
        status.current = "measuring the verify cost curve"
        costmodel.load_or_calibrate(lm)
        status.mark("cost curve ready")
    return lm


def warm_up(model: str, prompt: str, method: str, zero_gpu: bool = False, status: Startup = STATUS) -> None:
    """Everything the first live step would otherwise pay for, then one tree step through ui.gpu."""
    from specviz.lab.lab import Lab
    from specviz.methods import AUTO_BUDGET

    try:
        with GUARD.computing():  # no ZeroGPU worker forked while this thread loads or computes (ui.fork_guard)
            lm = _prepare(model, zero_gpu, status)
        status.current = "taking one tree step"
        lab = Lab()
        lab.apply(model, prompt, method, AUTO_BUDGET, {})
        lab.step(2)
        del lab
        status.mark("first tree step taken")
        status.ready_s = round(time.monotonic() - STARTED, 2)
        print(f"specviz: {lm.name} on {lm.device}: live steps ready {status.ready_s:.1f} s after start "
              f"({', '.join(f'{name} {at:.1f} s' for name, at in status.stages)})", flush=True)
    except Exception as error:  # noqa: BLE001 (any failure reaches the page as a message, never a spinner)
        status.error = str(error) if isinstance(error, SpecvizError) else f"{type(error).__name__}: {error}"
        status.current = "failed"
        traceback.print_exc()
        print(f"specviz: warm-up failed: {status.error}", flush=True)


def start_in_background(model: str, prompt: str, method: str, zero_gpu: bool = False) -> threading.Thread:
    thread = threading.Thread(target=warm_up, args=(model, prompt, method, zero_gpu), daemon=True,
                              name="specviz-warm-up")
    thread.start()
    return thread
