"""Every model computation of a serving process runs on one thread (runtime.compute_thread): OpenMP keeps a team per
thread that starts parallel work, and several teams throttle one another."""

import threading

import pytest

from specviz.runtime.compute_thread import COMPUTE, ComputeThread


def test_work_from_many_threads_runs_on_one_and_its_errors_come_back():
    compute = ComputeThread("test-compute")
    seen = []
    callers = [threading.Thread(target=lambda: seen.append(compute.run(threading.get_ident))) for _ in range(6)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(seen) == 6 and len(set(seen)) == 1 and seen[0] != threading.get_ident()
    assert compute.run(lambda: compute.run(threading.get_ident)) == seen[0]  # from itself: at once, no deadlock
    with pytest.raises(ZeroDivisionError):
        compute.run(lambda: 1 / 0)
    assert compute.run(sum, [1, 2]) == 3  # still serving after an error


def test_a_visitors_step_computes_on_the_compute_thread(lm, monkeypatch):
    """lab.model_calls hands each reply's work to the compute thread: the forwards of a Step from a handler's
    thread run there."""
    from specviz.engine import tree_forward
    from specviz.lab.lab import Lab
    from specviz.tree.budget import AUTO_BUDGET

    threads = set()
    real = tree_forward.verify_tree

    def watched(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(tree_forward, "verify_tree", watched)
    import specviz.engine.session as session_module
    monkeypatch.setattr(session_module, "verify_tree", watched)
    lab = Lab()
    lab.choose_values("", "Name three colours.", "racer", AUTO_BUDGET, {})
    handler = threading.Thread(target=lambda: lab.step(2), name="a-handler")
    handler.start()
    handler.join()
    assert threads == {COMPUTE.name}, threads



def test_a_serving_process_hands_the_gil_to_the_compute_thread_in_short_turns():
    """Beside a thread busy in Python, each torch operation of the compute thread waited a whole interpreter turn
    for the GIL (5 ms by default); app.py's main shortens the turn (the figures: runtime.compute_thread)."""
    import sys

    from specviz.runtime import compute_thread

    before = sys.getswitchinterval()
    try:
        compute_thread.short_gil_turns()
        assert sys.getswitchinterval() == pytest.approx(compute_thread.GIL_TURN_S)
        assert compute_thread.GIL_TURN_S < before
    finally:
        sys.setswitchinterval(before)
