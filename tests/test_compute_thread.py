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


def test_a_job_that_lends_the_thread_runs_the_waiting_jobs_first_and_goes_on():
    """Issue 73: a visitor's Step waited behind a crowd's prefill for its whole turn (2-15 s). A job that lends the
    thread (between a prefill's chunks) runs the jobs waiting then to their end, and goes on where it was; a lent
    job does not lend in turn; off the thread, or with nothing waiting, lending does nothing."""
    compute = ComputeThread("test-lending")
    order, lent = [], []
    waiting = threading.Event()

    def long_job():
        order.append("long begins")
        waiting.wait(10)
        while compute._jobs.empty():  # the other caller's job is in the queue
            pass
        lent.append(compute.lend())
        order.append("long ends")
        return "long"

    def quick_job():
        order.append("quick")
        lent.append(compute.lend())  # a lent job: nothing more runs inside it
        return "quick"

    results = {}
    first = threading.Thread(target=lambda: results.update(long=compute.run(long_job)))
    first.start()
    while not order:
        pass
    second = threading.Thread(target=lambda: results.update(quick=compute.run(quick_job)))
    second.start()
    waiting.set()
    first.join(10)
    second.join(10)
    assert results == {"long": "long", "quick": "quick"}
    assert order == ["long begins", "quick", "long ends"]
    assert lent[0] == 0.0 and lent[1] > 0.0  # the quick job's own lend did nothing; the long job's took its time
    assert compute.lend() == 0.0  # off the compute thread
    assert compute.run(compute.lend) == 0.0  # nothing waits


def test_two_visitors_prefills_interleave_between_chunks_and_give_their_tokens(lm, monkeypatch):
    """A long prompt's prefill lends the compute thread between its chunks (engine.checkpoints.lend_turn): another
    visitor's Step, sent meanwhile, runs inside it; both give the tokens each gives alone, and the long prefill's
    time does not count the Step's."""
    import time

    from specviz.engine import session as session_module
    from specviz.lab.lab import Lab
    from test_app import PROMPT

    monkeypatch.setattr(session_module, "PREFILL_CHUNK", 4)
    started = threading.Event()
    forward = session_module.causal_forward
    chunks = []

    def slow_forward(*args, **kwargs):  # the long prompt's chunks, slowed so that the Step comes during them
        chunks.append(threading.current_thread().name)
        started.set()
        time.sleep(0.05)
        return forward(*args, **kwargs)

    monkeypatch.setattr(session_module, "causal_forward", slow_forward)
    long_lab, quick_lab = Lab(), Lab()
    long_lab.choose_values("", PROMPT * 3, "pld", 8, {})
    quick_lab.choose_values("", "Hi.", "ar", 8, {})
    order = []
    long_caller = threading.Thread(target=lambda: (long_lab.step(4), order.append("long")))
    long_caller.start()
    started.wait(10)
    quick_lab.step(4)
    order.append("quick")
    long_caller.join(60)
    assert order == ["quick", "long"]  # the Step came back while the long prefill was still reading
    monkeypatch.setattr(session_module, "causal_forward", forward)
    alone_long, alone_quick = Lab(), Lab()
    alone_long.choose_values("", PROMPT * 3, "pld", 8, {})
    alone_quick.choose_values("", "Hi.", "ar", 8, {})
    alone_long.step(4)
    alone_quick.step(4)
    assert long_lab.session.output_ids == alone_long.session.output_ids
    assert quick_lab.session.output_ids == alone_quick.session.output_ids
    assert long_lab.session._lent_s > 0.0
