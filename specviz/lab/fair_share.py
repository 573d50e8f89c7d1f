"""A fair share of a public Space for each visitor, where the public policy only bounds the process as a whole.

A visitor is a browser session and the address it comes from (one person may open many sessions, or call the API with
a new session each time: the address counts them together; lab.visitor_address says which address). Per visitor: at
most one model call running, a number of events waiting in the queue (counted at the door, panels.visitor_gate, from
the moment each is let in), a number of new sessions per address in a window, new tokens per minute, wall-clock
seconds per call (checked before each step and between a prompt's chunks: a call past its deadline stops, keeps what
it made and says why; a shorter one while other visitors wait for the model, the shorter the more wait), a call
cancelled when its visitor leaves, and the uploaded traces it holds in memory, as the bytes they take in this process
(per visitor and for the process). Private use has no share: `FairShare(None)` refuses nothing and sets no deadline."""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Mapping

from specviz.errors import SpecvizError
from specviz.lab.model_time import ModelTime
from specviz.lab.visitor_address import address_of
from specviz.lab.visitors import SHARED_KEY as NO_SESSION  # a call that carries no session (a direct call)

MAX_SESSIONS_PER_ADDRESS = 256  # idle sessions the door remembers per address (sessions with pending events stay)
MAX_ADDRESSES = 50_000          # addresses the door and the token windows remember
MAX_SESSIONS_KNOWN = 100_000    # sessions whose address the queue's round-robin can look up


@dataclass(frozen=True)
class ShareLimits:
    """What one visitor may hold of a public Space (figures: docs/benchmarks.md, "A fair share per visitor", and
    docs/hostile-round-three.md)."""
    calls_running: int = 1          # model calls running at once, per session and per address
    events_waiting: int = 8         # events in the queue at once per session (running ones included)
    address_events_waiting: int = 16  # the same per address, every session of it together
    crowded_queue: float = 0.75     # past this part of the public queue's places ...
    crowded_events: int = 2         # ... an address with this many events in it waits for them first
    new_sessions: int = 60          # sessions an address may open ...
    new_sessions_window_s: float = 600.0  # ... in this many seconds
    tokens_per_minute: int = 4_096  # new tokens asked for in the last minute, per address
    call_seconds: float = 120.0     # wall-clock seconds one model call may run
    contended_call_seconds: float = 15.0  # ... and, over the visitors waiting for a place, while any wait
    shortest_turn_seconds: float = 1.0    # ... but never less than this
    live_sessions: int = 3          # sessions holding a model's state per address (a Lab and its two A/B sides)
    live_bytes: int = 160 * 2**20   # bytes those hold together (engine.held_memory), about 1,700 tokens
    replay_bytes: int = 48 * 2**20  # resident bytes of the uploaded traces an address holds in memory
    process_replay_bytes: int = 192 * 2**20  # ... and every visitor together


@dataclass(frozen=True)
class Visitor:
    session: str
    address: str


@dataclass
class CallBudget:
    """One model call's deadline and its visitor's cancellation, checked at the computation's checkpoints. While
    `others_waiting()` says n other visitors want the model (FairShare.contenders), the call also stops past
    `contended_s` / n, never sooner than `shortest_s`: no visitor holds the model for long while others wait, a
    newcomer behind a crowd waits about `contended_s` over the model's places however many addresses the crowd has,
    and alone a call may run to its full deadline."""
    deadline: float | None = None   # time.monotonic() past which the call stops (None: none)
    cancelled: threading.Event = field(default_factory=threading.Event)
    seconds: float | None = None
    started: float = field(default_factory=time.monotonic)
    contended_s: float | None = None
    others_waiting: Callable[[], int] | None = None
    shortest_s: float = 1.0
    steps_begun: int = 0   # checkpoints before a step passed: a call's first step is never cut for others' sake
    lent_s: float = 0.0    # seconds this call lent the compute thread to others' work (not counted as its own)

    def check(self) -> None:
        """SpecvizError (one sentence) once the call must stop: what it made so far is kept by the caller."""
        self._stop_if_due("what it generated is kept: Run again to go on.")

    def check_reading_prompt(self) -> None:
        """check() between a prefill's chunks (engine.checkpoints): the same stops, and a sentence that says the
        prompt was not read yet (the next call reads it from its start)."""
        self._stop_if_due("it was still reading the prompt, and your run is as it was: a shorter prompt gets through "
                          "sooner.")

    def check_at(self, reading_prompt: bool) -> None:
        """The check at an engine's checkpoint (engine.checkpoints): between a prefill's chunks, or before a step.
        Before the call's first step only the visitor's leaving stops it: every call makes a step once its prompt
        is read (a call cut there for others' sake, or at a deadline its prefill used up, had read it for nothing,
        and under a crowd a visitor's Run made no step); the prefill itself stops between its chunks."""
        if reading_prompt:
            self.check_reading_prompt()
            return
        self.steps_begun += 1
        if self.steps_begun > 1 or self.cancelled.is_set():
            self.check()

    def lend(self, lend: Callable[[], float]) -> float:
        """Lend the compute thread (lend: runtime.compute_thread's): its seconds move this call's deadline and turn."""
        lent = lend()
        if self.deadline is not None or self.contended_s is not None:  # not UNLIMITED, which every call shares
            self.lent_s += lent
        return lent

    def _stop_if_due(self, after: str) -> None:
        if self.cancelled.is_set():
            raise SpecvizError("This call stopped because its visitor left the page.")
        now = time.monotonic() - self.lent_s
        if self.deadline is not None and now > self.deadline:
            raise SpecvizError(f"This call reached this Space's limit of {self.seconds:.0f} s per call and stopped; "
                               f"{after}")
        ran = now - self.started
        if self.contended_s is None or self.others_waiting is None or ran <= self.shortest_s:
            return
        waiting = int(self.others_waiting())
        if waiting and ran > max(self.shortest_s, self.contended_s / waiting):
            raise SpecvizError(f"This call stopped after {ran:.0f} s to let other visitors' calls run; {after}")


UNLIMITED = CallBudget()


def visitor_of(request) -> Visitor:
    """The visitor behind a Gradio request (gr.Request, or None for a direct call)."""
    session = getattr(request, "session_hash", None) or NO_SESSION
    headers = getattr(request, "headers", None) or {}
    client = getattr(request, "client", None)
    return Visitor(session, address_of(headers.get("x-forwarded-for"), getattr(client, "host", None)))


@dataclass(frozen=True)
class Admission:
    """An event the door let into the queue: counted against its session and address until Gradio's own pending
    map holds it (FairShare.joined, once the join is answered)."""
    session: str
    address: str


class FairShare:
    def __init__(self, limits: ShareLimits | None = None):
        self.limits = limits
        self._lock = threading.Lock()
        self._running: dict[str, list[CallBudget]] = {}      # session or address -> its running calls' budgets
        self._tokens: dict[str, deque] = {}                  # address -> (time, tokens) asked for in the window
        self._replays: dict[int, tuple] = {}                 # id(lab) -> (ref to lab, ref to trace, address, bytes)
        self._sessions: dict[str, OrderedDict] = {}           # address -> its sessions, oldest first (the door's)
        self._new_sessions: dict[str, deque] = {}             # address -> when it opened its recent sessions
        self._joining: dict[str, int] = {}                    # "s:"/"a:" key -> events let in, not yet in Gradio's map
        self._address: OrderedDict[str, str] = OrderedDict()  # session -> its address (the queue's round-robin)
        # the other addresses whose events wait for a place in the model's group (panels.queue_guard sets it;
        # None: none ever)
        self.model_waiting: Callable[[str], set[str]] | None = None
        self.model_time = ModelTime()  # each address's recent model seconds (the queue's turns, the yields)

    def configure(self, limits: ShareLimits | None) -> None:
        self.limits = limits

    # ---- model calls ----------------------------------------------------------------------------------
    @contextmanager
    def model_call(self, visitor: Visitor, tokens: int):
        """A model call of visitor asking for up to `tokens` new tokens: refused (one sentence) while another of
        theirs runs or past their tokens per minute; else its CallBudget for the call loop, released at the end."""
        limits = self.limits
        if limits is None:
            yield UNLIMITED
            return
        budget = CallBudget(time.monotonic() + limits.call_seconds, seconds=limits.call_seconds,
                            contended_s=limits.contended_call_seconds, shortest_s=limits.shortest_turn_seconds,
                            others_waiting=lambda: len(self.contenders(visitor.address)))
        keys = (f"s:{visitor.session}", f"a:{visitor.address}")
        with self._lock:
            if any(len(self._running.get(k, ())) >= limits.calls_running for k in keys):
                raise SpecvizError("Your previous call is still running: wait for it to finish (or press Stop), "
                                   "then try again.")
            self._charge(visitor.address, tokens, limits)
            for key in keys:
                self._running.setdefault(key, []).append(budget)
        started = self.model_time.started(visitor.address)
        try:
            yield budget
        finally:
            self.model_time.finished(visitor.address, started)
            with self._lock:
                for key in keys:
                    calls = self._running.get(key, [])
                    if budget in calls:
                        calls.remove(budget)
                    if not calls:
                        self._running.pop(key, None)

    def contenders(self, address: str) -> set[str]:
        """The other addresses that want the model now: those whose events wait for a place, and those whose calls
        run at its other places (they share its one compute thread: each of their replies waits for this call's)."""
        probe = self.model_waiting
        with self._lock:
            running = {k[2:] for k, calls in self._running.items() if k.startswith("a:") and calls}
        return ((probe(address) if probe is not None else set()) | running) - {address}

    def _charge(self, address: str, tokens: int, limits: ShareLimits) -> None:
        """Count tokens against the address's minute (call with the lock held)."""
        if tokens > limits.tokens_per_minute:
            raise SpecvizError(f"This call asks for {tokens:,} new tokens and this Space generates at most "
                               f"{limits.tokens_per_minute:,} per visitor per minute: ask for fewer (fewer prompts, "
                               "points or tokens).")
        now = time.monotonic()
        if len(self._tokens) > MAX_ADDRESSES:  # forget the addresses whose minute is over
            for key in [k for k, w in self._tokens.items() if not w or now - w[-1][0] > 60]:
                self._tokens.pop(key, None)
        window = self._tokens.setdefault(address, deque())
        while window and now - window[0][0] > 60:
            window.popleft()
        used = sum(n for _, n in window)
        if used + tokens > limits.tokens_per_minute:
            wait = 60 - (now - window[0][0]) if window else 60
            raise SpecvizError(f"This Space generates at most {limits.tokens_per_minute:,} new tokens per visitor "
                               f"per minute and this call asks for {tokens:,} more: try again in {wait:.0f} s.")
        window.append((now, tokens))

    def cancel(self, session: str | None) -> int:
        """The visitor's session left: its running calls stop at their next check; how many there were."""
        with self._lock:
            budgets = list(self._running.get(f"s:{session or NO_SESSION}", ()))
        for budget in budgets:
            budget.cancelled.set()
        return len(budgets)

    def running(self) -> int:
        with self._lock:
            return sum(len(v) for k, v in self._running.items() if k.startswith("s:"))

    # ---- memory a visitor holds ---------------------------------------------------------------------------
    def check_replay(self, lab, visitor: Visitor, size: int) -> None:
        """Before lab replays a trace that takes size bytes in this process (lab.resident_bytes, measured once it is
        read): refused (one sentence) when it would take the process past its budget even once the visitor's own
        other uploads are let go, or the visitor past theirs on its own. Changes nothing: the visitor's shown run
        stays as it is when refused."""
        limits = self.limits
        if limits is None:
            return
        with self._lock:
            others = sum(e[3] for e in self._live_replays() if e[0]() is not lab and e[2] != visitor.address)
        if size > limits.replay_bytes or others + size > limits.process_replay_bytes:
            raise SpecvizError("This Space holds as many uploaded traces as it can right now: try again in a few "
                               "minutes, or replay a shipped trace.")

    def hold_replay(self, lab, trace, visitor: Visitor, size: int) -> None:
        """lab now replays trace, which takes size bytes in this process (check_replay allowed it): count it, and
        let the visitor's own oldest uploads go where they and this one pass the visitor's budget."""
        limits = self.limits
        if limits is None:
            return
        with self._lock:
            mine = [e for e in self._live_replays() if e[2] == visitor.address and e[0]() is not lab]
            let_go = []
            while mine and sum(e[3] for e in mine) + size > limits.replay_bytes:
                oldest = mine.pop(0)
                self._replays.pop(id(oldest[0]()), None)
                let_go.append(oldest[0]())
            self._replays[id(lab)] = (weakref.ref(lab), weakref.ref(trace), visitor.address, size)
        for old in let_go:
            if old is not None:
                old.drop_replay("⚠️ Your older uploaded trace was let go to make room for your new one.")

    def _live_replays(self) -> list[tuple]:
        """Uploads still shown by their session, oldest first (dropped ones forgotten); call with the lock held."""
        live = []
        for key, entry in list(self._replays.items()):
            lab, trace = entry[0](), entry[1]()
            if lab is None or trace is None or lab.replay is not trace:
                self._replays.pop(key, None)
            else:
                live.append(entry)
        return live

    # ---- the queue's door ------------------------------------------------------------------------------
    def admit(self, session: str, address: str, pending: Mapping[str, set], queued: int = 0,
              max_queue: int | None = None) -> Admission | str:
        """Whether one more event of (session, address) may join the queue: an Admission (the door calls joined()
        once Gradio has answered the join), or the sentence that refuses it. pending: Gradio's events waiting or
        running per session; queued: events waiting in its queue, of max_queue places. The events let in and not yet
        in pending count too, so a burst of joins at once is held to the same limits as joins one after another."""
        limits = self.limits
        if limits is None:
            return Admission(session, address)
        now = time.monotonic()
        with self._lock:
            mine = len(pending.get(session, ())) + self._joining.get(f"s:{session}", 0)
            if mine >= limits.events_waiting:
                return (f"This session already has {limits.events_waiting} requests waiting or running on this "
                        "Space: wait for them to finish.")
            known = self._sessions.get(address, OrderedDict())
            of_address = sum(len(pending.get(s, ())) for s in known if s != session) + \
                len(pending.get(session, ())) + self._joining.get(f"a:{address}", 0)
            if of_address >= limits.address_events_waiting:
                return (f"Your address already has {limits.address_events_waiting} requests waiting or running on "
                        "this Space: wait for them to finish.")
            joining = self._joining.get("all", 0)
            if max_queue and queued + joining >= limits.crowded_queue * max_queue and \
                    of_address >= limits.crowded_events:
                return ("This Space's queue is nearly full: wait for your requests there to finish, so that other "
                        "visitors get a place too.")
            if session not in known:
                opened = self._new_sessions.setdefault(address, deque())
                while opened and now - opened[0] > limits.new_sessions_window_s:
                    opened.popleft()
                if len(opened) >= limits.new_sessions:
                    wait = limits.new_sessions_window_s - (now - opened[0])
                    return (f"Your address opened {limits.new_sessions} sessions on this Space in the last "
                            f"{limits.new_sessions_window_s / 60:.0f} minutes: keep using an open page, or try "
                            f"again in {wait / 60:.0f} minutes.")
                opened.append(now)
            self._remember(session, address, pending)
            for key in (f"s:{session}", f"a:{address}", "all"):
                self._joining[key] = self._joining.get(key, 0) + 1
        return Admission(session, address)

    def joined(self, admission: Admission) -> None:
        """The join of an admitted event was answered: Gradio's pending map holds it now (or it was refused)."""
        with self._lock:
            for key in (f"s:{admission.session}", f"a:{admission.address}", "all"):
                left = self._joining.get(key, 0) - 1
                if left > 0:
                    self._joining[key] = left
                else:
                    self._joining.pop(key, None)

    def _remember(self, session: str, address: str, pending: Mapping[str, set]) -> None:
        """The session counts for its address from now on (call with the lock held)."""
        sessions = self._sessions.setdefault(address, OrderedDict())
        sessions.pop(session, None)
        sessions[session] = None
        if len(sessions) > MAX_SESSIONS_PER_ADDRESS:  # sessions with nothing pending, oldest first
            for old in [s for s in sessions if not pending.get(s)][:len(sessions) - MAX_SESSIONS_PER_ADDRESS]:
                sessions.pop(old, None)
        self._address.pop(session, None)
        self._address[session] = address
        while len(self._address) > MAX_SESSIONS_KNOWN:
            self._address.popitem(last=False)
        while len(self._sessions) > MAX_ADDRESSES:  # the addresses seen longest ago
            gone = next(iter(self._sessions))
            self._sessions.pop(gone)
            self._new_sessions.pop(gone, None)

    def address_of_session(self, session: str | None) -> str | None:
        """The address a session's events came from (None: one the door never let in)."""
        with self._lock:
            return self._address.get(session or "")


SHARE = FairShare()
