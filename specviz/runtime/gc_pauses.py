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
import threading

_lock = threading.Lock()


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
