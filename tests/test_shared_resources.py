"""Process-wide shared resources: each has its own lock, so one slow load never blocks another."""

import threading

from specviz.runtime import shared_resources as resources


def test_loading_one_resource_never_blocks_another():
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(60)
        return "slow"

    worker = threading.Thread(target=lambda: resources.shared(("test", "slow"), slow))
    worker.start()
    assert started.wait(30)
    assert resources.shared(("test", "fast"), lambda: "fast") == "fast"
    # the slow load is still inside its loader: the fast one did not wait for its lock
    assert worker.is_alive() and not release.is_set()
    release.set()
    worker.join(5)
    assert resources.shared(("test", "slow"), lambda: "again") == "slow"  # loaded once
