"""Page faults per step of a full 64-node tree: after the first steps, a step's logits (12.8 MB on the default
model), its softmax and the rest should come from memory the last step freed (runtime.memory_release's heap
policy), not be faulted in again. glibc's defaults were seen to fault 1,700 to 6,700 pages a step; how many a
step faults under the policy depends on the machine and on what else the process holds, so this is measured and
printed, never asserted in a test."""

from __future__ import annotations

import resource
import statistics
from dataclasses import dataclass

from specviz.engine.session import Session
from specviz.runtime import memory_release

PROMPT = "Tell a short story about a robot that learns to bake bread."


@dataclass(frozen=True)
class PageFaults:
    heap_policy: bool          # the heap policy is on (glibc, SPECVIZ_MALLOC not "stock")
    per_step: tuple[int, ...]  # minor page faults of each step, in order
    warm_up_steps: int         # the first steps, left out of the median (they grow the heap)

    @property
    def median_after_warm_up(self) -> float:
        return statistics.median(self.per_step[self.warm_up_steps:])


def step_page_faults(lm, steps: int = 20, warm_up_steps: int = 4) -> PageFaults:
    """Minor page faults of each of `steps` racer steps verifying a full 64-node tree."""
    kept = memory_release.keep_freed_memory()
    # min_path_prob=0: the copy-logit tree offers every node, so each step verifies a full 64-node tree
    session = Session(lm, "racer", {"min_path_prob": 0}, budget=64).start([{"role": "user", "content": PROMPT}])
    faults = []
    for _ in range(steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        session.step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return PageFaults(kept, tuple(faults), warm_up_steps)
