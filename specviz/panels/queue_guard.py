"""Gradio's queue, guarded where a visitor could stop it or take it (installed by the door, panels.visitor_gate, on
the queue it finds; the figures and the upstream report: docs/gradio-queue-report.md).

- **Outgoing messages.** Gradio 6.31 keeps each session's outgoing messages in a 2,000-entry LRU that evicts by
  insertion, whatever the session waits for; a message to an evicted session raises KeyError in the queue's
  processing task, which then marks the queue stopped for good. Here the map evicts only sessions with nothing
  pending, and a message to a session that is gone is dropped.
- **A watchdog.** Should the queue stop anyway while the server runs, it is restarted within a second and the log
  says why; the places of the events its stop cancelled are freed (an event cancelled before it ran never frees
  its own), and their sessions are told to send them again.
- **Turns by address.** Gradio serves each concurrency group first in, first out: forty long Runs from twenty
  addresses made a newcomer's Step wait behind all of them. Here the model's next event is the one whose address
  has had the least of the model lately (lab.model_time) with what the event asks for (its prompt's length), less
  its wait (never below the address's own); any other group's the one whose address was served longest ago. The
  fair share learns which other addresses wait for it: a long call's turn is then its contended time over them
  (lab.fair_share), so that a newcomer behind a crowd of any size waits about one contended time.
- **A quick place.** An event whose prompt asks more than QUICK_ASK_S of the model is long, and long events hold at
  most all the model's places but one: the last is a quick event's, whose work the long call's prefill lets run
  between its chunks (runtime.compute_thread.lend).
- **Abandoned answers.** A session that joined and never reads its stream keeps its answers in memory and its
  events counted: once nothing of it runs and nobody has read it for ABANDONED_S, both are dropped.
- **The heap trimmed.** Every ABANDONED_S / 4 while no model call runs, the heap's freed bytes beyond a threshold go
  back to the system (runtime.memory_release.give_back_when_kept).
- **Turns in the log.** Each event's wait for its place and its run, by address, at INFO on `specviz.turns`
  (app.py shows it with SPECVIZ_LOG_LEVEL=INFO): what an operator, or the soak test, reads to tell a slow queue
  from a slow model.
- **The loop paced.** While a model call runs, the event loop takes at most a share of the interpreter's time
  (panels.loop_pacing): a flood of requests no longer starves the model's threads of the GIL.
- **Analytics.** Gradio recomputes a pandas summary of up to 10,000 past events after every event, for a
  monitoring page this Space does not offer: kept to a few events and never recomputed."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
import traceback
from collections import OrderedDict
from contextlib import contextmanager

from specviz.lab.call_activity import ACTIVITY
from specviz.lab.fair_share import FairShare
from specviz.panels.loop_pacing import pace_loop
from specviz.panels.page_context import MODEL_QUEUE
from specviz.runtime.memory_release import give_back_when_kept, heap_figures

# what an event asks of the model, roughly: a call's own time, and its prompt's characters at the prefill's pace
# (measured 2026-12-02 on the 2-core AMD EPYC, default model: 6,035 tokens, 20,021 characters, in 27 s; 46 tokens
# in 0.17 s). Only the order of the waiting events reads it.
CALL_BASE_S = 0.2
PREFILL_CHARS_PER_S = 750.0
AGING = 0.25  # seconds of turn an event gains per second it waits
# an event whose prompt asks more than this of the model is a long one:
# long ones take at most all the model's places but one, which stays for quick ones (the soak: a crowd's long Runs,
# aged past the honest visitors' seconds together, held both places turn after turn and an honest Step waited
# behind all of them, 48-50 s)
QUICK_ASK_S = 2.0
LONG_STARTED_KEPT_S = 300.0  # a long event whose end was never seen is forgotten after this (a call runs 120 s at most)

LOG = logging.getLogger("specviz.queue")
TURNS = logging.getLogger("specviz.turns")
SESSION_MESSAGES = 2_000      # sessions whose outgoing messages are kept (Gradio's figure); busy ones beyond it stay
ABANDONED_S = 60.0
WATCH_S = 1.0
ANALYTICS_EVENTS = 100
RESTARTED = "This Space's queue restarted while your request ran: send it again."


class SessionMessages(OrderedDict):
    """In place of Gradio's LRU of outgoing message queues: never evicts a session with events pending (Gradio's
    pending map), and a lookup of a session that is gone gives a queue nobody reads (the message is dropped)."""

    def __init__(self, queue, capacity: int = SESSION_MESSAGES, items=()):
        self.queue, self.capacity, self.dropped = queue, capacity, 0  # before the items: __setitem__ reads them
        super().__init__()
        for key, value in dict(items).items():
            super().__setitem__(key, value)

    def __setitem__(self, key, value):
        if key in self:
            self.move_to_end(key)
        else:
            pending = self.queue.pending_event_ids_session
            while len(self) >= self.capacity:
                idle = next((k for k in self if not pending.get(k)), None)
                if idle is None:  # every session waits for something: keep them all
                    break
                super().__delitem__(idle)
        super().__setitem__(key, value)

    def __getitem__(self, key):
        try:
            return super().__getitem__(key)
        except KeyError:
            self.dropped += 1
            return asyncio.Queue()

    def __delitem__(self, key):  # Gradio deletes a session whose stream was cancelled: it may be gone already
        self.pop(key, None)


class QueueGuard:
    def __init__(self, blocks, share: FairShare):
        self.blocks, self.share = blocks, share
        self._queue = None
        self._watchdog: asyncio.Task | None = None
        self._pacer: asyncio.Task | None = None                 # panels.loop_pacing
        self._served: OrderedDict[str, float] = OrderedDict()  # address -> when its last event started
        self._long_running: dict[str, float] = {}               # the model's long events started -> when
        self._readers: dict[str, int] = {}                      # session -> streams open now
        self._last_seen: dict[str, float] = {}                  # session -> its last join or stream
        self._processing: dict[int, list] = {}                  # id -> events whose processing runs now
        self.restarts: list[str] = []                           # why the queue stopped, each time it did

    # ---- installing ---------------------------------------------------------------------------------------
    def ensure(self) -> None:
        """Guard the blocks' current queue (once per queue object: queue() makes a new one) and start the
        watchdog; called by the door on every request, in the server's event loop."""
        queue = getattr(self.blocks, "_queue", None)
        if queue is None or queue is self._queue:
            return
        self._queue = queue
        if not isinstance(queue.pending_messages_per_session, SessionMessages):
            queue.pending_messages_per_session = SessionMessages(queue, items=queue.pending_messages_per_session)
        processing, choose = queue.start_processing, queue.get_events

        async def logged_processing():
            try:
                await processing()
            except BaseException as error:
                self.restarts.append(f"{type(error).__name__}: {error}")
                LOG.error("specviz: Gradio's queue stopped: %s", "".join(traceback.format_exception(error)))
                raise

        async def tracked_processing(events, *args, **kwargs):  # which started events still run (restart needs it)
            self._processing[id(events)] = events
            began = time.monotonic()
            try:
                await process(events, *args, **kwargs)
            finally:
                self._processing.pop(id(events), None)
                for event in events:
                    self._long_running.pop(_event_key(event), None)
                if TURNS.isEnabledFor(logging.INFO):
                    self._log_turns(events, began)

        process = queue.process_events
        queue.start_processing = logged_processing
        queue.process_events = tracked_processing
        queue.get_events = lambda: self._in_turn(queue, choose)
        queue.ANALYTICS_MAX_EVENTS, queue.ANAYLTICS_CACHE_FREQUENCY = ANALYTICS_EVENTS, math.inf
        self.share.model_waiting = self.model_waiting
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        if self._pacer is None or self._pacer.done():
            self._pacer = asyncio.get_running_loop().create_task(pace_loop(self.share.running))

    # ---- turns by address ---------------------------------------------------------------------------------
    def _address(self, event) -> str:
        return self.share.address_of_session(event.session_hash) or event.session_hash

    def _in_turn(self, queue, choose):
        """Gradio's get_events, after each group that may start an event is put in turn order, and the model's long
        events held back while they hold all its places but one."""
        model = queue.event_queue_per_concurrency_id.get(MODEL_QUEUE)
        for group in queue.event_queue_per_concurrency_id.values():
            if len(group.queue) > 1 and (group.concurrency_limit is None or
                                         group.current_concurrency < group.concurrency_limit):
                if group is model:
                    now = time.monotonic()
                    group.queue.sort(key=lambda e: (self._model_turn(e, now), e.enqueue_time))
                else:
                    group.queue.sort(key=lambda e: (self._served.get(self._address(e), -math.inf), e.enqueue_time))
        held_back = self._hold_back_long(model) if model is not None else []
        try:
            chosen = choose()
        finally:
            if held_back:
                model.queue.extend(held_back)
        if chosen:
            now = time.monotonic()
            if chosen[2] == MODEL_QUEUE:  # (events, batch, their group)
                self._long_running.update((_event_key(e), now) for e in chosen[0] if self._is_long(e))
            for event in chosen[0]:
                address = self._address(event)
                self._served.pop(address, None)
                self._served[address] = now
            while len(self._served) > 50_000:
                self._served.popitem(last=False)
        return chosen

    def _hold_back_long(self, model) -> list:
        """While the model's long events hold all its places but one: its long events taken out of its queue (for
        Gradio's next pick only), so that the last place goes to a quick one; a quick event then waits for a quick
        place and, on the compute thread, for a long call's next chunk (runtime.compute_thread.lend), not for its
        turn."""
        now = time.monotonic()
        for event_id in [i for i, t in self._long_running.items() if now - t > LONG_STARTED_KEPT_S]:
            self._long_running.pop(event_id, None)
        places = model.concurrency_limit or 1
        if len(self._long_running) < max(1, places - 1) or not model.queue:
            return []
        quick, held = [], []
        for event in model.queue:
            (held if self._is_long(event) else quick).append(event)
        if held:
            model.queue[:] = quick
        return held

    def _model_turn(self, event, now: float) -> float:
        """When the model's event should go, in seconds (lowest first): its address's recent model seconds, and the
        seconds it asks for (its text inputs read at the prefill's pace) less a quarter of the seconds it has
        waited, down to none: a long prompt behind a stream of short requests goes in the end, but waiting never
        takes an event ahead of an address that has had less of the model (in the soak a backlog of long Runs
        aged 200 s went ahead of every visitor, who waited 100-137 s)."""
        return self.share.model_time.recent(self._address(event)) + max(0.0, _asked(event) - AGING *
                                                                         (now - event.enqueue_time))

    @staticmethod
    def _is_long(event) -> bool:
        """An event whose prompt asks for more than a quick turn. (Not one whose address's last call stopped at its
        share: under a crowd every honest Run does, at its 1-s turn, and the soak's honest visitors then waited
        with the crowd's long Runs, 54-59 s.)"""
        return _asked(event) > QUICK_ASK_S

    def model_waiting(self, address: str) -> set[str]:
        """The other addresses with an event waiting for a place in the model's group, whatever they had of the
        model lately: turns by recent seconds alone let each fresh address of a crowd keep the model for a whole
        call while a visitor who had used it more waited (the soak: honest waits of 200 s behind 10-50 s calls)."""
        queue = self._queue
        group = queue.event_queue_per_concurrency_id.get(MODEL_QUEUE) if queue is not None else None
        if group is None:
            return set()
        return {self._address(e) for e in list(group.queue)} - {address}

    def _log_turns(self, events, began: float) -> None:
        """One line per event: its function, its group, its address, the seconds it waited for its place and ran."""
        ran = time.monotonic() - began
        for event in events:
            TURNS.info("turn fn=%s group=%s address=%s waited=%.2f ran=%.2f", getattr(event.fn, "name", "?"),
                       event.concurrency_id, self._address(event), began - event.enqueue_time, ran)

    # ---- readers ------------------------------------------------------------------------------------------
    def seen(self, session: str) -> None:
        self._last_seen[session] = time.monotonic()

    @contextmanager
    def reading(self, session: str):
        """A stream of the session is open (its queue data, an API call's answers, its heartbeat)."""
        self._readers[session] = self._readers.get(session, 0) + 1
        try:
            yield
        finally:
            left = self._readers.get(session, 1) - 1
            if left > 0:
                self._readers[session] = left
            else:
                self._readers.pop(session, None)
            self.seen(session)

    def session_of_event(self, event_id: str) -> str | None:
        queue = self._queue
        if queue is None:
            return None
        event = queue.event_ids_to_events.get(event_id)
        if event is not None:
            return event.session_hash
        return next((s for s, ids in list(queue.pending_event_ids_session.items()) if event_id in ids), None)

    # ---- the watchdog -------------------------------------------------------------------------------------
    async def _watch(self) -> None:
        swept = time.monotonic()
        while True:
            await asyncio.sleep(WATCH_S)
            queue = self._queue
            if queue is None:
                continue
            try:
                if queue.stopped and self.blocks.is_running:
                    await asyncio.sleep(0.5)  # Blocks.close() stops the queue a moment before it stops running
                    if queue.stopped and self.blocks.is_running:
                        self.restart(queue)
                if time.monotonic() - swept > ABANDONED_S / 4:
                    swept = time.monotonic()
                    self.drop_abandoned(queue)
                    if not ACTIVITY.busy:  # no model call runs (private mode too): what the heap kept goes back
                        await asyncio.to_thread(give_back_when_kept)  # the heap's lock, not the loop
                    if TURNS.isEnabledFor(logging.INFO):
                        _log_held(self.blocks)
            except Exception:  # noqa: BLE001 (the watchdog itself never stops)
                LOG.exception("specviz: the queue's watchdog failed once")

    def restart(self, queue) -> None:
        """Start a stopped queue again; the sessions whose running events were cancelled read why."""
        from gradio.server_messages import ProcessCompletedMessage
        from gradio.utils import run_coro_in_background

        why = self.restarts[-1] if self.restarts else "stopped without an error"
        LOG.warning("specviz: Gradio's queue had stopped (%s): restarting it", why)
        # the loop's end cancelled the events it had started; one cancelled before it ran never freed its place
        for slot, events in enumerate(queue.active_jobs):
            if events is not None and id(events) not in self._processing:
                queue.active_jobs[slot] = None
                group = queue.event_queue_per_concurrency_id.get(events[0].concurrency_id)
                if group is not None:
                    group.current_concurrency = max(0, group.current_concurrency - 1)
                for event in events:
                    queue.event_ids_to_events.pop(event._id, None)
                    self._long_running.pop(_event_key(event), None)  # it holds no place now
        for session, ids in list(queue.pending_event_ids_session.items()):
            for event_id in [i for i in ids if i not in queue.event_ids_to_events]:
                queue.pending_messages_per_session[session].put_nowait(ProcessCompletedMessage(
                    event_id=event_id, output={"error": RESTARTED}, success=False, title="Error"))
        queue.stopped = False
        run_coro_in_background(queue.start_processing)
        run_coro_in_background(queue.start_progress_updates)
        if not queue.live_updates:
            run_coro_in_background(queue.notify_clients)

    def drop_abandoned(self, queue) -> int:
        """Sessions whose events are all done and that nobody has read for ABANDONED_S: their answers and counts
        go. How many of them had answers nobody read."""
        now, dropped = time.monotonic(), 0
        running = {e.session_hash for e in queue.event_ids_to_events.values()}
        for session, ids in list(queue.pending_event_ids_session.items()):
            if session in running or self._readers.get(session):
                continue
            if now - self._last_seen.get(session, now) < ABANDONED_S:
                self._last_seen.setdefault(session, now)
                continue
            # Gradio leaves an empty entry behind for every session that ever joined: those go too
            queue.pending_event_ids_session.pop(session, None)
            queue.pending_messages_per_session.pop(session, None)
            self._last_seen.pop(session, None)
            dropped += bool(ids)
        for session in [s for s, t in self._last_seen.items() if now - t > 10 * ABANDONED_S]:
            self._last_seen.pop(session, None)
        return dropped


def _event_key(event):
    return getattr(event, "_id", None) or id(event)


def _asked(event) -> float:
    """What an event asks of the model, in seconds: a call's own time, and its text inputs read at the prefill's pace."""
    data = getattr(getattr(event, "data", None), "data", None) or ()
    return CALL_BASE_S + sum(len(value) for value in data if isinstance(value, str)) / PREFILL_CHARS_PER_S


def _log_held(blocks) -> None:
    """The sessions holding a model's state and the bytes they hold (lab.live_sessions), the sessions in Gradio's
    store, the C heap's bytes in use and freed but kept (runtime.memory_release) and Python's allocated blocks,
    every ABANDONED_S / 4 at INFO on `specviz.turns`: the soak test tells what the live sessions hold from what
    nothing holds, and an operator where a process's memory is."""
    from specviz.lab.live_sessions import LIVE

    app = getattr(blocks, "server_app", None) or getattr(blocks, "app", None)
    stored = len(getattr(getattr(app, "state_holder", None), "session_data", ()))
    heap = heap_figures()
    TURNS.info("held sessions=%d bytes=%d gradio_sessions=%d heap_in_use=%d heap_free_kept=%d python_blocks=%d",
               LIVE.count(), LIVE.held_bytes(), stored, heap.in_use if heap else -1, heap.free_kept if heap else -1,
               sys.getallocatedblocks())
