"""The sessions that hold a model's state (a Lab with a started generation, each A/B side): at most a number of
them, and of the bytes they hold together (their caches' and drafters' tensors, engine.held_memory: a session's
memory grows with its context, and a count of tokens missed its spare room and the kernel's copies, issue 73), in
public mode, so that the process's memory has a bound. When one more starts, every idle one gives back what only a
running forward needs (Lab.trim_at_rest), then the least recently used idle one is released (its KV caches and
baselines dropped) while the others are over the limits, and its visitor reads why when they come back. A session
whose model the shared registry released to make room is released too: it would otherwise pin a copy of the weights
that the model slots no longer count. Weak references: the registry keeps nothing alive."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from specviz.runtime.shared_resources import on_model_released

ROOM_MESSAGE = ("⚠️ This session was released to make room for other visitors (this Space keeps {limit} running "
                "at once). Press Step to start again.")
VISITOR_MESSAGE = ("⚠️ This session was released: this Space keeps {limit} sessions per visitor, and another of "
                   "yours started. Press Step to start again.")
MODEL_GONE_MESSAGE = ("⚠️ The model this session ran was unloaded to make room for another one. Press Step to "
                      "load it again and start over.")


class LiveSessions:
    def __init__(self, limit: int | None = None, byte_limit: int | None = None):
        self.limit = limit                # sessions holding state at once (None: no limit)
        self.byte_limit = byte_limit      # bytes they hold together (None: no limit)
        self.visitor_limit: int | None = None        # the same per visitor (Lab.visitor_address)
        self.visitor_byte_limit: int | None = None
        self._labs: OrderedDict[int, weakref.ref] = OrderedDict()   # id -> Lab, least recently used first
        self._lock = threading.Lock()

    def touch(self, *labs) -> None:
        """labs (a Lab, or both A/B sides) are about to run one model call: they are the most recently used;
        the idle others are trimmed, then the oldest idle ones released until the sessions, and the bytes they
        hold, are within the limits, the visitor's own first (labs count as sessions held, whatever they hold)."""
        with self._lock:
            for lab in labs:
                self._labs.pop(id(lab), None)
                self._labs[id(lab)] = weakref.ref(lab)
            if self.limit is None and self.byte_limit is None and self.visitor_limit is None:
                return
            current = {id(lab) for lab in labs}
            others = [old for old in self._alive() if id(old) not in current and old.holds_state]
            for old in others:
                if not old.streaming:  # a Run between its frames keeps its copies for its next reply
                    old.trim_at_rest()
            held = {id(lab): lab.held_bytes for lab in (*others, *labs)}
            address = labs[0].visitor_address
            # a visitor over their own share lets their own least recently used sessions go first
            own = self._over(labs, [old for old in others if address and old.visitor_address == address],
                             self.visitor_limit, self.visitor_byte_limit, held)
            chosen = {id(old) for old in own}
            others = [old for old in others if id(old) not in chosen]
            released = self._over(labs, others, self.limit, self.byte_limit, held)
            kept = self.limit or len(others) - len(released) + len(labs)  # the count a byte limit left
        for old in own:
            old.release_with(VISITOR_MESSAGE.format(limit=self.visitor_limit))
        for old in released:
            old.release_with(ROOM_MESSAGE.format(limit=kept))

    @staticmethod
    def _over(labs: tuple, held: list, limit: int | None, byte_limit: int | None, sizes: dict[int, int]) -> list:
        """Which of held (least recently used first) to release so that they and labs keep within the limits
        (sizes: id(lab) -> the bytes it holds)."""
        if limit is None and byte_limit is None:
            return []
        count = len(held) + len(labs)
        total = sum(sizes[id(lab)] for lab in (*held, *labs))
        chosen = []
        for old in held:
            if (limit is None or count <= limit) and (byte_limit is None or total <= byte_limit):
                break
            if old.stepping.locked():  # busy: a call is running on it
                continue
            chosen.append(old)
            count, total = count - 1, total - sizes[id(old)]
        return chosen

    def release_model(self, key: tuple) -> None:
        """The shared registry released the model under key: release every session on it."""
        _, name, mode = key
        with self._lock:
            holding = [lab for lab in self._alive() if lab.settings is not None
                       and (lab.settings.model, lab.loaded_mode) == (name, mode)]
        for lab in holding:
            lab.release_with(MODEL_GONE_MESSAGE)

    def count(self) -> int:
        with self._lock:
            return sum(1 for lab in self._alive() if lab.holds_state)

    def held_bytes(self) -> int:
        with self._lock:
            return sum(lab.held_bytes for lab in self._alive() if lab.holds_state)

    def _alive(self) -> list:
        """Live labs, least recently used first (dead references dropped); call with the lock held."""
        found = []
        for key, ref in list(self._labs.items()):
            lab = ref()
            if lab is None:
                self._labs.pop(key, None)
            else:
                found.append(lab)
        return found


LIVE = LiveSessions()
on_model_released(LIVE.release_model)
