"""Gradio's store of sessions (its StateHolder), bounded by what the process can hold. Gradio keeps, for every
session that ever sent an event, a copy of the page's configuration and the last value of every output it
updated, until 10,000 sessions (about 0.4 MB each here: 1,000 page loads from one address left 390 MB); a closed
session's entry stays until then too. Public mode sets the store's capacity from the memory budget
(public_policy.MAX_GRADIO_SESSIONS; Gradio evicts the least recently used beyond it), releases an evicted session's
own objects as a disconnect would (lab.visitors), and drops Gradio's entry of a session when that session is
released. The door (panels.visitor_gate) installs this on the app it serves."""

from __future__ import annotations

import threading
from collections import OrderedDict

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
