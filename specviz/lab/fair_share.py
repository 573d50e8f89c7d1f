"""A fair share of a public Space for each visitor, where the public policy only bounds the process as a whole.

A visitor is a browser session and the address it comes from (one person may open many sessions, or call the API
with a new session each time: the address counts them together). Per visitor: at most one model call running,
a number of events waiting in the queue (panels.visitor_gate counts them at the door), new tokens per minute,
wall-clock seconds per call (the model-call loop checks after every reply: a call past its deadline stops, keeps
what it made and says why), a call cancelled when its visitor leaves, and the uploaded traces it holds in memory
(per visitor and for the process). Private use has no share: `FairShare(None)` refuses nothing and sets no
deadline."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field

from specviz.errors import SpecvizError
from specviz.lab.visitors import SHARED_KEY as NO_SESSION  # a call that carries no session (a direct call)

MAX_SESSIONS_PER_ADDRESS = 256  # idle sessions the door remembers per address (sessions with pending events stay)
MAX_ADDRESSES = 50_000          # addresses the door and the token windows remember


@dataclass(frozen=True)
class ShareLimits:
    """What one visitor may hold of a public Space (figures: docs/benchmarks.md, "A fair share per visitor")."""
    calls_running: int = 1          # model calls running at once, per session and per address
    events_waiting: int = 8         # events in the queue at once per session (running ones included)
    address_events_waiting: int = 16  # the same per address, every session of it together
    tokens_per_minute: int = 4_096  # new tokens asked for in the last minute, per address
    call_seconds: float = 120.0     # wall-clock seconds one model call may run
    live_sessions: int = 3          # sessions holding a model's state per address (a Lab and its two A/B sides)
    live_tokens: int = 4_000        # context tokens those hold together
    replay_bytes: int = 8 * 2**20   # uploaded trace files held in memory per address
    process_replay_bytes: int = 64 * 2**20  # ... and by every visitor together


@dataclass(frozen=True)
class Visitor:
    session: str
    address: str


@dataclass
class CallBudget:
    """One model call's deadline and its visitor's cancellation, checked by the call loop after each reply."""
    deadline: float | None = None   # time.monotonic() past which the call stops (None: none)
    cancelled: threading.Event = field(default_factory=threading.Event)
    seconds: float | None = None

    def check(self) -> None:
        """SpecvizError (one sentence) once the call must stop: what it made so far is kept by the caller."""
        if self.cancelled.is_set():
            raise SpecvizError("This call stopped because its visitor left the page.")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise SpecvizError(f"This call reached this Space's limit of {self.seconds:.0f} s per call and stopped; "
                               "what it generated is kept: Run again to go on.")


UNLIMITED = CallBudget()


def visitor_of(request) -> Visitor:
    """The visitor behind a Gradio request (gr.Request, or None for a direct call)."""
    session = getattr(request, "session_hash", None) or NO_SESSION
    headers = getattr(request, "headers", None) or {}
    client = getattr(request, "client", None)
    return Visitor(session, address_of(headers.get("x-forwarded-for"), getattr(client, "host", None)))


def address_of(forwarded: str | None, peer: str | None) -> str:
    """The visitor's address: on a Space the last X-Forwarded-For entry (the one the Space's own proxy wrote; the
    ones before it come from the client and can be anything), elsewhere the connection's peer."""
    if forwarded and os.environ.get("SPACE_ID"):
        return forwarded.split(",")[-1].strip() or "unknown"
    return peer or "unknown"


class FairShare:
    def __init__(self, limits: ShareLimits | None = None):
        self.limits = limits
        self._lock = threading.Lock()
        self._running: dict[str, list[CallBudget]] = {}      # session or address -> its running calls' budgets
        self._tokens: dict[str, deque] = {}                  # address -> (time, tokens) asked for in the window
        self._replays: dict[int, tuple] = {}                 # id(lab) -> (ref to lab, ref to trace, address, bytes)
        self._sessions: dict[str, dict[str, None]] = {}      # address -> its sessions, oldest first (the door's)

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
        budget = CallBudget(time.monotonic() + limits.call_seconds, seconds=limits.call_seconds)
        keys = (f"s:{visitor.session}", f"a:{visitor.address}")
        with self._lock:
            if any(len(self._running.get(k, ())) >= limits.calls_running for k in keys):
                raise SpecvizError("Your previous call is still running: wait for it to finish (or press Stop), "
                                   "then try again.")
            self._charge(visitor.address, tokens, limits)
            for key in keys:
                self._running.setdefault(key, []).append(budget)
        try:
            yield budget
        finally:
            with self._lock:
                for key in keys:
                    calls = self._running.get(key, [])
                    if budget in calls:
                        calls.remove(budget)
                    if not calls:
                        self._running.pop(key, None)

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
        """Before lab reads an upload of size bytes: refused (one sentence) when it would take the process past its
        budget even once the visitor's own other uploads are let go, or the visitor past theirs on its own.
        Changes nothing: the visitor's shown run stays as it is when refused."""
        limits = self.limits
        if limits is None:
            return
        with self._lock:
            others = sum(e[3] for e in self._live_replays() if e[0]() is not lab and e[2] != visitor.address)
        if size > limits.replay_bytes or others + size > limits.process_replay_bytes:
            raise SpecvizError("This Space holds as many uploaded traces as it can right now: try again in a few "
                               "minutes, or replay a shipped trace.")

    def hold_replay(self, lab, trace, visitor: Visitor, size: int) -> None:
        """lab now replays trace, read from an upload of size bytes (check_replay allowed it): count it, and let
        the visitor's own oldest uploads go where they and this one pass the visitor's budget."""
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
    def admits(self, session: str | None, address: str, pending: dict) -> str | None:
        """Whether one more event of (session, address) may join the queue, given Gradio's pending events per
        session: None, or the sentence that refuses it."""
        limits = self.limits
        if limits is None:
            return None
        with self._lock:
            of_address = list(self._sessions.get(address, ()))
        if session and len(pending.get(session, ())) >= limits.events_waiting:
            return (f"This session already has {limits.events_waiting} requests waiting or running on this Space: "
                    "wait for them to finish.")
        if sum(len(pending.get(s, ())) for s in {*of_address, session}) >= limits.address_events_waiting:
            return (f"Your address already has {limits.address_events_waiting} requests waiting or running on this "
                    "Space: wait for them to finish.")
        with self._lock:  # admitted: the session counts for its address from now on
            sessions = self._sessions.setdefault(address, {})
            sessions.pop(session, None)
            sessions[session] = None
            for old in [s for s in sessions if not pending.get(s)][:-MAX_SESSIONS_PER_ADDRESS or None]:
                sessions.pop(old, None)  # sessions with nothing pending, oldest first, beyond the ones remembered
            while len(self._sessions) > MAX_ADDRESSES:  # the addresses seen longest ago
                self._sessions.pop(next(iter(self._sessions)))
        return None


SHARE = FairShare()
