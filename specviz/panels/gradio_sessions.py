"""Gradio's store of sessions (its StateHolder), bounded by what the process can hold. Gradio keeps, for every
session that ever sent an event, a copy of the page's configuration and the last value of every output it
updated, until 10,000 sessions (about 0.4 MB each here: 1,000 page loads from one address left 390 MB); a closed
session's entry stays until then too. Public mode sets the store's capacity from the memory budget
(public_policy.MAX_GRADIO_SESSIONS; Gradio evicts the least recently used beyond it), releases an evicted session's
own objects as a disconnect would (lab.visitors), and drops Gradio's entry of a session when that session is
released, and a new session's state copies no block configs up front (_LazyStateHolder). The door
(panels.visitor_gate) installs this on the app it serves."""

from __future__ import annotations

import threading
from collections import OrderedDict

from gradio.state_holder import SessionState, StateHolder

from specviz.lab import visitors


class _NotedEvictions(OrderedDict):
    """Gradio's session map; an entry Gradio evicts for room (popitem of the oldest) releases its session."""

    def __init__(self, items, on_evicted):
        super().__init__(items)
        self.on_evicted = on_evicted

    def popitem(self, last: bool = True):
        key, value = super().popitem(last=last)
        if not last:
            self.on_evicted(key)
        return key, value


class _NoBlockConfigs:
    """What Gradio's SessionState reads of the app's blocks when it is made, without the blocks whose config it
    copies then: it makes each block's copy when an update needs it (Gradio's own `_update_value_in_config`)."""

    def __init__(self, blocks):
        self.default_config, self.blocks = blocks.default_config, {}


class _LazyStateHolder(StateHolder):
    """Gradio's store, whose new sessions copy no block configs up front. Gradio made that copy of all of the
    page's blocks for every new session hash, on the event loop: the soak's churn of new sessions kept the loop
    there (py-spy: 31 of 70 s) while every visitor's events waited to start and end. The whole copy serves only
    deep links, which this app does not offer (lab.route_rules closes the route)."""

    def __getitem__(self, session_id: str):
        if session_id not in self.session_data:
            self.session_data[session_id] = SessionState(_NoBlockConfigs(self.blocks))
        return super().__getitem__(session_id)


class SessionStore:
    def __init__(self, blocks):
        self.blocks = blocks
        self._holder = None
        self.evicted = 0

    def ensure(self) -> None:
        """Guard the app's session store once (called by the door on every request)."""
        app = getattr(self.blocks, "server_app", None) or getattr(self.blocks, "app", None)
        holder = getattr(app, "state_holder", None)
        if holder is None or holder is self._holder:
            return
        self._holder = holder
        holder.__class__ = _LazyStateHolder
        holder.session_data = _NotedEvictions(holder.session_data, self._evicted)
        if self.forget not in visitors.RELEASE_HOOKS:
            visitors.RELEASE_HOOKS.append(self.forget)

    def _evicted(self, session: str) -> None:
        """Gradio let the session's state go for room (under its store's lock): its objects are released on a
        thread of their own, as a disconnect would release them."""
        self.evicted += 1
        threading.Thread(target=visitors.release, args=(session,), daemon=True, name="session-evicted").start()

    def forget(self, session: str | None) -> None:
        """The session was released: Gradio's entry of it goes (a running event keeps its own reference)."""
        holder = self._holder
        if holder is not None and session:
            holder.session_data.pop(session, None)
            holder.time_last_used.pop(session, None)
