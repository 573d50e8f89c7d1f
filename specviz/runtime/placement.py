"""Where a model's calls run on a ZeroGPU Space: on the GPU that ZeroGPU lends per call, or on the Space's own CPUs.

A ZeroGPU call pays before any work: ZeroGPU's scheduling and a forked worker, the session's state pickled in and
back with its KV caches rebuilt from their tokens (`dev state-cost`, docs/benchmarks.md), and it spends the
visitor's daily quota (2 minutes unauthenticated, 5 with a free account). A Step of the default 135M model takes
about 0.05 s on two CPU cores (a verify forward of a 16-node tree, docs/benchmarks.md), a Run of 64 tokens about
1.5 s: on the CPUs it answers sooner than a GPU call's fixed cost alone and costs no quota. The 360M and 1.7B cost
3x and 13x as much per token, where the GPU pays. So by default the default model runs on the CPUs and every other
on the GPU; SPECVIZ_CPU_MODELS (comma-separated model names, or `none`) is the Space owner's setting. A model
placed on the CPUs is loaded there (not on cuda, where ZeroGPU keeps the others) and its calls never reach
`spaces.GPU`. Off ZeroGPU nothing here applies: a machine's own device runs everything."""

from __future__ import annotations

import os

DEFAULT_CPU_MODELS = ("smollm2-135m-instruct",)  # runtime.loading.DEFAULT_MODEL


def on_zero_gpu() -> bool:
    """Whether this process runs on a ZeroGPU Space (the hub sets SPACES_ZERO_GPU there)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def on_space() -> bool:
    """Whether this process runs on a Hugging Face Space (the hub sets SPACE_ID there): its visitors' browsers run on
    their own machines, never on its cores."""
    return bool(os.environ.get("SPACE_ID"))


def cpu_models() -> tuple[str, ...]:
    setting = os.environ.get("SPECVIZ_CPU_MODELS")
    if setting is None:
        return DEFAULT_CPU_MODELS
    if setting.strip().lower() == "none":
        return ()
    return tuple(name.strip() for name in setting.split(",") if name.strip())


def placed_on_cpu(model: str) -> bool:
    """Whether a model (its key: runtime.shared_resources.model_key) runs on the CPUs of this ZeroGPU Space."""
    return on_zero_gpu() and model in cpu_models()
