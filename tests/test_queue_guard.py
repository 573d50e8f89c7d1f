"""Issue 73: a queue no visitor can stop, and turns by address. Gradio 6.31 keeps each session's outgoing messages
in a 2,000-entry map that evicts by insertion; a message to an evicted session that still waits raises KeyError in
the queue's processing task, and the queue stops for everyone. A small app behind the door (panels.visitor_gate,
panels.queue_guard) with that map cut to 20 sessions: one event runs and holds its group, two wait behind it, and
40 new sessions churn through; the waiting visitors and later ones are served. A queue stopped anyway is restarted
by the watchdog, which logs why. Without the guard the same churn stops the queue (docs/gradio-queue-report.md)."""

import http.client
import json
import logging
import threading
import time
from types import SimpleNamespace

import pytest

from specviz.errors import SpecvizError
from specviz.lab.fair_share import FairShare, ShareLimits
from specviz.lab.public_policy import Policy
from specviz.panels.queue_guard import QueueGuard, SessionMessages
from test_app import free_port

CAPACITY = 20


@pytest.fixture(params=[True], ids=["door"])
def toy(request):
    """A two-event app behind the door (or, with the param False, Gradio alone): `slow` (one at a time, until
    released) and `fast`."""
    import gradio as gr
    from starlette.middleware import Middleware

    from specviz.panels.visitor_gate import VisitorGate

    release = threading.Event()

    def slow(text):
        release.wait(60)
        return text

    with gr.Blocks() as demo:
        box, out = gr.Textbox(), gr.Textbox()
        gr.Button().click(slow, box, out, api_name="slow", concurrency_id="slow", concurrency_limit=1)
        gr.Button().click(lambda text: text, box, out, api_name="fast")
    share = FairShare(ShareLimits(new_sessions=10_000, address_events_waiting=10_000))
    port = free_port()
    door = {"middleware": [Middleware(VisitorGate, blocks=demo, share=share, policy=Policy.for_public())]}
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                        app_kwargs=door if request.param else {})
    yield SimpleNamespace(demo=demo, port=port, release=release, fns={f.api_name: i for i, f in demo.fns.items()})
    release.set()
    demo.close()


def join(toy, name: str, session: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", toy.port, timeout=30)
    connection.request("POST", "/gradio_api/queue/join", json.dumps(
        {"data": [session], "fn_index": toy.fns[name], "session_hash": session, "event_data": None,
         "trigger_id": None}), {"Content-Type": "application/json"})
    status = connection.getresponse().status
    connection.close()
    return status


def answer(toy, session: str, timeout: float = 60) -> str | None:
    """The session's answer from its stream (the event's output), or None when none came."""
    connection = http.client.HTTPConnection("127.0.0.1", toy.port, timeout=timeout)
    try:
        connection.request("GET", f"/gradio_api/queue/data?session_hash={session}")
        for raw in connection.getresponse():
            line = raw.decode().strip()
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return (message.get("output") or {}).get("data", [None])[0] if message.get("success") else None
                if message.get("msg") in ("close_stream", "unexpected_error"):
                    return None
    except OSError:
        return None
    finally:
        connection.close()
    return None


def test_a_churn_of_new_sessions_cannot_stop_the_queue(toy):
    assert join(toy, "slow", "running") == 200
    messages = toy.demo._queue.pending_messages_per_session
    assert isinstance(messages, SessionMessages)  # the door guarded the queue on its first request
    messages.capacity = CAPACITY
    time.sleep(0.5)  # "running" runs and holds its group
    for session in ("waiting-1", "waiting-2"):
        assert join(toy, "slow", session) == 200
    for n in range(2 * CAPACITY):  # new sessions, each answered and read: Gradio's map would evict the waiting
        assert join(toy, "fast", f"churn-{n}") == 200
        assert answer(toy, f"churn-{n}") == f"churn-{n}"
    assert "waiting-1" in messages and "waiting-2" in messages
    toy.release.set()
    assert answer(toy, "running") == "running"
    assert answer(toy, "waiting-1") == "waiting-1" and answer(toy, "waiting-2") == "waiting-2"
    assert not toy.demo._queue.stopped
    assert join(toy, "fast", "later") == 200 and answer(toy, "later") == "later"
    assert len(messages) <= CAPACITY + 3  # idle sessions went to make room


@pytest.mark.parametrize("toy", [False], ids=["gradio-alone"], indirect=True)
def test_without_the_guard_the_same_churn_stops_gradios_queue(toy):
    """The reproduction is the attack: Gradio's own map, cut to the same size, evicts a waiting session and its
    queue stops for everyone (docs/gradio-queue-report.md). Should a Gradio release fix it, this test fails and
    panels.queue_guard's map can go."""
    assert join(toy, "slow", "running") == 200
    messages = toy.demo._queue.pending_messages_per_session
    assert not isinstance(messages, SessionMessages)
    messages.max_size = CAPACITY
    time.sleep(0.5)
    for session in ("waiting-1", "waiting-2"):
        assert join(toy, "slow", session) == 200
    for n in range(2 * CAPACITY):
        assert join(toy, "fast", f"churn-{n}") == 200
        answer(toy, f"churn-{n}", timeout=10)
    assert "waiting-1" not in messages  # evicted while it waits
    toy.release.set()
    deadline = time.monotonic() + 10
    while not toy.demo._queue.stopped and time.monotonic() < deadline:
        time.sleep(0.1)
    assert toy.demo._queue.stopped
    assert join(toy, "fast", "later") == 503


def test_a_stopped_queue_is_restarted_and_the_log_says_why(toy, caplog):
    toy.release.set()
    assert join(toy, "fast", "before") == 200 and answer(toy, "before") == "before"
    queue = toy.demo._queue
    broadcast = queue.broadcast_estimations
    failures = []

    def fails_once(concurrency_id, after=None):
        """What an evicted session's KeyError did inside Gradio's processing task (which broadcasts to every
        waiting event as one starts; a join broadcasts to the new event alone, with `after`)."""
        if after is None and not failures:
            failures.append(1)
            raise KeyError("an evicted session")
        return broadcast(concurrency_id, after)

    queue.broadcast_estimations = fails_once
    with caplog.at_level(logging.WARNING):
        assert join(toy, "fast", "stopping") == 200
        deadline = time.monotonic() + 10
        while not failures and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.5)  # the watchdog looks every second
        assert not queue.stopped
        assert join(toy, "fast", "after") == 200 and answer(toy, "after") == "after"
    assert any("restarting" in r.getMessage() and "KeyError" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


def turns(share: FairShare, group_name: str):
    """A stand-in queue with one concurrency group, guarded: (its group, the queue, the guard, the sessions picked
    so far, Gradio's get_events that picks the group's first event)."""
    group = SimpleNamespace(queue=[], concurrency_limit=2, current_concurrency=1)
    queue = SimpleNamespace(event_queue_per_concurrency_id={group_name: group}, pending_event_ids_session={})
    guard = QueueGuard(SimpleNamespace(), share)
    guard._queue = queue
    picked = []

    def first():
        if not group.queue:  # as Gradio's: nothing to start
            return None
        event = group.queue.pop(0)
        picked.append(event.session_hash)
        return [event], False, group_name

    return group, queue, guard, picked, first


def test_the_next_event_is_from_the_address_served_longest_ago():
    """In a group that runs no model (the page's own events), the next event is the one whose address waited
    longest since its last turn, first in, first out within an address."""
    share = FairShare(ShareLimits())
    for session, address in (("a1", "A"), ("a2", "A"), ("b1", "B"), ("new", "N")):
        share.joined(share.admit(session, address, {}))
    group, queue, guard, picked, first = turns(share, "page")
    events = [SimpleNamespace(session_hash=s, enqueue_time=t) for t, s in enumerate(["a1", "a2", "b1", "new"])]

    group.queue[:] = events[:3]
    guard._in_turn(queue, first)                      # A's first event, in order of arrival
    assert picked == ["a1"]
    group.queue.append(events[3])                     # a newcomer arrives behind A's second event and B's
    guard._in_turn(queue, first)
    guard._in_turn(queue, first)
    assert picked[1:] == ["b1", "new"]                # A, just served, waits for the addresses not served yet


def test_the_models_next_event_is_from_the_address_that_had_the_least_of_it():
    """Issue 73, a crowd: forty long Runs from twenty addresses made an honest Step wait 169 s, and turns by address
    alone still put a visitor behind every address of a crowd. The model's next event is now the one whose address
    has had the fewest model seconds lately (halved every minute; a running call counts as it runs), and a long
    call yields at its contended deadline to any other address that waits."""
    from specviz.lab.model_time import ModelTime

    clock = [1000.0]
    share = FairShare(ShareLimits())
    share.model_time = ModelTime(half_life_s=60.0, clock=lambda: clock[0])
    for address, seconds in (("A", 30.0), ("B", 5.0)):  # A kept the model 30 s, B 5 s
        started = share.model_time.started(address)
        clock[0] += seconds
        share.model_time.finished(address, started)
    for session, address in (("a1", "A"), ("b1", "B"), ("n1", "N")):
        share.joined(share.admit(session, address, {}))
    group, queue, guard, picked, first = turns(share, "model")

    group.queue[:] = [SimpleNamespace(session_hash=s, enqueue_time=t) for t, s in enumerate(["a1", "b1", "n1"])]
    for _ in range(3):
        guard._in_turn(queue, first)
    assert picked == ["n1", "b1", "a1"]  # the newcomer first, then by the seconds each had, whatever the arrival
    group.queue[:] = [SimpleNamespace(session_hash="b1", enqueue_time=9)]
    running = share.model_time.started("A")
    clock[0] += 15
    assert guard.model_waiting("A") == {"B"}  # A's call, 15 s in, yields to B
    share.model_time.finished("A", running)
    newcomer = share.model_time.started("N")
    clock[0] += 2
    # N's first call yields to B too, though B had more: in the soak each fresh address of a crowd kept the model
    # for a whole call while honest visitors who had used it more waited 200 s
    assert guard.model_waiting("N") == {"B"}
    share.model_time.finished("N", newcomer)
    assert guard.model_waiting("B") == set()  # only its own event waits
    assert abs(share.model_time.recent("B") - 5.0 * 2 ** (-17 / 60)) < 1e-9  # halved every minute
    # a fresh address's Run on a 20,000-character prompt (about 27 s of prefill here) waits behind B's short Step,
    # though it came first and B has had the model for 4 s lately
    share.joined(share.admit("c1", "C", {}))
    now = time.monotonic()
    group.queue[:] = [SimpleNamespace(session_hash="c1", enqueue_time=now, data=SimpleNamespace(data=["x" * 20_000])),
                      SimpleNamespace(session_hash="b1", enqueue_time=now, data=SimpleNamespace(data=["Count."]))]
    guard._in_turn(queue, first)
    assert picked[-1] == "b1"
    # waiting cancels what an event asks for, not its address's own seconds: a backlog of C's long Runs that waited
    # 200 s does not go ahead of B, who has had less of the model (the soak: honest waits of 100-137 s)
    for _ in range(3):
        started = share.model_time.started("C")
        clock[0] += 4
        share.model_time.finished("C", started)
    old = now - 200
    group.queue[:] = [SimpleNamespace(session_hash="c1", enqueue_time=old, data=SimpleNamespace(data=["x" * 20_000])),
                      SimpleNamespace(session_hash="b1", enqueue_time=now, data=SimpleNamespace(data=["Count."]))]
    assert share.model_time.recent("C") > share.model_time.recent("B")
    guard._in_turn(queue, first)
    assert picked[-1] == "b1"


def test_the_message_map_evicts_only_idle_sessions():
    queue = SimpleNamespace(pending_event_ids_session={"busy": {"e1"}})
    messages = SessionMessages(queue, capacity=2)
    messages["busy"], messages["idle"], messages["new"] = 1, 2, 3
    assert list(messages) == ["busy", "new"]
    queue.pending_event_ids_session["new"] = {"e2"}
    messages["newer"] = 4  # nothing idle to evict: every session that waits is kept
    assert list(messages) == ["busy", "new", "newer"]
    assert messages["gone"].qsize() == 0 and messages.dropped == 1  # a message to a session that is gone: dropped
    del messages["gone"]


def test_long_events_leave_the_models_last_place_to_quick_ones():
    """Issue 73's soak: a crowd's long Runs (prompts of 20,000 characters), aged past the honest visitors' recent
    seconds together, held both of the model's places turn after turn and an honest Step waited 48-50 s behind
    them. While long events hold all the places but one, the last goes to a quick event (a long one waits, and goes
    back into the queue in its turn); with no long event running, the turn order alone decides."""
    share = FairShare(ShareLimits())
    for session, address in (("c1", "C1"), ("c2", "C2"), ("h1", "H")):
        share.joined(share.admit(session, address, {}))
    group, queue, guard, picked, first = turns(share, "model")
    group.current_concurrency = 0
    now = time.monotonic()

    def event(session, text, at):
        return SimpleNamespace(session_hash=session, enqueue_time=now - at, _id=f"{session}-{at}",
                               data=SimpleNamespace(data=[text]))

    long_prompt = "x" * 20_000
    group.queue[:] = [event("c1", long_prompt, 300), event("c2", long_prompt, 300)]
    guard._in_turn(queue, first)  # nothing runs: a long event may take a place
    assert picked == ["c1"]
    group.current_concurrency = 1
    guard._in_turn(queue, first)  # one long runs: the last place is kept for a quick one, none waits
    assert picked == ["c1"] and [e.session_hash for e in group.queue] == ["c2"]
    group.queue.append(event("h1", "Count.", 0))
    guard._in_turn(queue, first)
    assert picked == ["c1", "h1"] and [e.session_hash for e in group.queue] == ["c2"]
    guard._long_running.clear()  # c1's call ended
    group.current_concurrency = 1
    guard._in_turn(queue, first)
    assert picked == ["c1", "h1", "c2"]


def test_a_calls_turn_does_not_count_the_seconds_it_lent_to_others():
    """A long call that lent the compute thread to a visitor's Step (runtime.compute_thread.lend) is not charged for
    it: its contended turn and its deadline count its own seconds."""
    from specviz.lab.fair_share import UNLIMITED, CallBudget

    budget = CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - 5, contended_s=6,
                        others_waiting=lambda: 1)
    assert budget.lend(lambda: 3.0) == 3.0 and budget.lent_s == 3.0
    budget.check()  # 5 s wall, 2 s its own: within its turn of 6 s
    budget.lend(lambda: 3.0)
    budget.check()  # its own seconds went back below zero: still within
    late = CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - 8, contended_s=6,
                      others_waiting=lambda: 1)
    late.lend(lambda: 1.0)
    with pytest.raises(SpecvizError, match="to let other visitors' calls run"):
        late.check()  # 7 s its own: past its turn
    UNLIMITED.lend(lambda: 2.0)
    assert UNLIMITED.lent_s == 0.0  # the budget every private call shares keeps nothing
