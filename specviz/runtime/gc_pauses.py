"""Keep the cyclic garbage collector's full passes short.

A loaded model, its tokenizer and the torch / transformers modules are about 370,000 objects that a full
collection scans every time. On this machine one such pass took about 180 ms, and one came every few
prompts: a stalled decode step that no drafting method can win back. Those objects live as long as the
process, so after a load they go to the permanent generation (`gc.freeze`), which collections skip.
Whatever else was alive at that moment (a browser session's objects) is frozen too; `collect_everything`
lets it all go again, collects, and freezes what is left, so a released session's reference cycles are
still freed."""

from __future__ import annotations

import gc
import os
import threading

_lock = threading.Lock()


def _fresh_lock_in_a_fork() -> None:  # runtime.shared_resources says why
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_a_fork)


def freeze_long_lived() -> None:
    """Call after loading something the process keeps (a model, a datastore)."""
    with _lock:
        gc.collect()
        gc.freeze()


def collect_everything() -> None:
    """A full collection that also reaches frozen objects (a released session frozen by a later load)."""
    with _lock:
        gc.unfreeze()
        gc.collect()
        gc.freeze()


MIN_COLLECTION_GAP_S = 5.0   # requested collections: at most one this often
# ... and at most this share of the time: a full pass holds the GIL, and in the soak (issue 73: 677 sessions
# churned, each reset asking for one) passes of 0.8 s came every 5 s, 16% of the time every thread stood still
MAX_COLLECTING_SHARE = 0.05
_requested = threading.Event()
_collector: list[threading.Thread] = []


def request_collection() -> None:
    """collect_everything soon, on a background thread, at most once every MIN_COLLECTION_GAP_S (longer where
    passes are long: collection_gap_s) however often it is asked for: what a handler anyone may call in a loop asks
    for instead of collecting itself."""
    with _lock:
        if not _collector:
            worker = threading.Thread(target=_collect_when_asked, name="specviz-collector", daemon=True)
            _collector.append(worker)
            worker.start()
    _requested.set()


def _collect_when_asked() -> None:
    import time

    from specviz.runtime.memory_release import give_back_freed_memory

    while True:
        _requested.wait()
        _requested.clear()
        started = time.monotonic()
        collect_everything()
        give_back_freed_memory()
        time.sleep(collection_gap_s(time.monotonic() - started))


def collection_gap_s(took_s: float) -> float:
    """The rest after a requested collection that took took_s: MIN_COLLECTION_GAP_S, or longer where passes this
    long would take more than MAX_COLLECTING_SHARE of the time."""
    return max(MIN_COLLECTION_GAP_S, took_s / MAX_COLLECTING_SHARE - took_s)
