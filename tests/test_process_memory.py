"""The process's memory policy: long-lived objects frozen, the heap policy applied, and a 64-node tree's
steps reusing freed memory instead of faulting it in."""

import gc
import os
import resource
import statistics
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from specviz.engine.session import Session
from specviz.runtime import memory_release
from specviz.runtime.gc_pauses import collect_everything, freeze_long_lived


class _Cycle:
    def __init__(self):
        self.me = self


def test_loaded_objects_are_frozen_and_a_frozen_cycle_is_still_freed_on_release():
    freeze_long_lived()
    assert gc.get_freeze_count() > 0
    session_like = _Cycle()                  # a browser session alive while something loads ...
    alive = weakref.ref(session_like)
    freeze_long_lived()                      # ... gets frozen with the load
    del session_like
    gc.collect()
    assert alive() is not None               # a plain collection skips frozen objects
    collect_everything()                     # what Lab.release runs
    assert alive() is None
    assert gc.get_freeze_count() > 0         # and the long-lived objects are frozen again


GLIBC = memory_release._libc is not None  # set on Linux with glibc only


def test_the_heap_policy_is_applied_unless_told_not_to():
    script = ("import sys; sys.path.insert(0, {root!r}); from specviz.runtime import memory_release; "
              "print(memory_release.keep_freed_memory())").format(root=str(Path(__file__).resolve().parents[1]))
    kept = {}
    for policy in ("keep", "stock"):
        out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "SPECVIZ_MALLOC": policy},
                             capture_output=True, text=True, timeout=120, check=True).stdout.strip()
        kept[policy] = out == "True"
    assert kept == {"keep": GLIBC, "stock": False}
    assert memory_release.give_back_freed_memory() == GLIBC


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_steps_of_a_64_node_tree_reuse_freed_memory_instead_of_faulting_it_in(lm):
    """Each step allocates its 12.8 MB of logits, a softmax as large and more; after the first steps they
    come from memory the last step freed (glibc's defaults were seen to fault 1,700 to 6,700 pages a step)."""
    # min_path_prob=0: the copy-logit tree offers every node, so each step verifies a full 64-node tree
    session = Session(lm, "racer", {"min_path_prob": 0}, budget=64).start(
        [{"role": "user", "content": "Tell a short story about a robot that learns to bake bread."}])
    faults = []
    # 16 steps after the first four: in a full suite's long-lived process an occasional step still faults
    # a logits-sized block in (3 of 6 steps once, median 304), so six steps made a noisy median
    for _ in range(20):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        session.step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    assert statistics.median(faults[4:]) < 300, faults
