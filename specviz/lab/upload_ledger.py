"""The files visitors upload (Gradio's /upload writes them to disk before any event reads them), as the door
(panels.visitor_gate) records them: who sent each, which session uses it, and how much of the disk every address
and all of them hold. An upload past an address's share lets that address's own oldest files go; past the share
of all, the oldest files no session uses go; if that is not room enough the new upload is refused. A session's
files go when the session is released (lab.visitors), and a file no session takes up within UNCLAIMED_S goes at the
next upload. Only a file recorded here may be named as an event's input."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

UNCLAIMED_S = 600.0


@dataclass
class Upload:
    path: Path
    address: str
    size: int
    at: float
    session: str | None = None   # the session whose event named it, once one did


class UploadLedger:
    def __init__(self, address_bytes: int | None = None, total_bytes: int | None = None):
        self.address_bytes, self.total_bytes = address_bytes, total_bytes
        self._lock = threading.Lock()
        self._files: OrderedDict[str, Upload] = OrderedDict()  # path -> upload, oldest first

    def configure(self, address_bytes: int | None, total_bytes: int | None) -> None:
        self.address_bytes, self.total_bytes = address_bytes, total_bytes

    def record(self, paths: list[str], address: str) -> bool:
        """An /upload from address wrote paths: True when they are kept (older files let go to make room as the
        module's note says), False when there is no room even so (they are removed)."""
        now = time.time()
        new = []
        for name in paths:
            path = Path(name)
            try:
                new.append(Upload(path, address, path.stat().st_size, now))
            except OSError:
                continue
        gone: list[Path] = []
        with self._lock:
            # the same content uploaded again lands on the same path (Gradio names the folder by its hash): held once
            new = [u for u in new if str(u.path) not in self._files]
            gone += [u.path for u in self._take(lambda u: u.session is None and now - u.at > UNCLAIMED_S)]
            size = sum(u.size for u in new)
            if self.address_bytes is not None:
                mine = [u for u in self._files.values() if u.address == address]
                held = sum(u.size for u in mine)
                for old in mine:  # the address's own oldest files first
                    if held + size <= self.address_bytes:
                        break
                    held -= old.size
                    gone.append(self._files.pop(str(old.path)).path)
                kept = held + size <= self.address_bytes
            else:
                kept = True
            if kept and self.total_bytes is not None:
                held = sum(u.size for u in self._files.values())
                for old in [u for u in self._files.values() if u.session is None]:
                    if held + size <= self.total_bytes:
                        break
                    held -= old.size
                    gone.append(self._files.pop(str(old.path)).path)
                kept = held + size <= self.total_bytes
            if kept:
                for upload in new:
                    self._files[str(upload.path)] = upload
        _remove(gone if kept else gone + [u.path for u in new])
        return kept

    def claim(self, path: str, session: str) -> bool:
        """An event of session names path as its input: True when path is an upload recorded here (it is the
        session's from now on and goes with it), False for any other path."""
        with self._lock:
            upload = self._files.get(str(Path(path)))
            if upload is None:
                return False
            upload.session = upload.session or session
            return True

    def release_session(self, session: str | None) -> int:
        """The session was released: its files go; how many there were."""
        if not session:
            return 0
        with self._lock:
            gone = [u.path for u in self._take(lambda u: u.session == session)]
        _remove(gone)
        return len(gone)

    def held_bytes(self, address: str | None = None) -> int:
        with self._lock:
            return sum(u.size for u in self._files.values() if address is None or u.address == address)

    def _take(self, which) -> list[Upload]:
        """Remove and return the uploads `which` picks (call with the lock held)."""
        taken = [u for u in self._files.values() if which(u)]
        for upload in taken:
            self._files.pop(str(upload.path), None)
        return taken


def _remove(paths: list[Path]) -> None:
    """Each file, and its folder (Gradio writes each upload into a folder named by its hash) once empty."""
    for path in paths:
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()
        except OSError:
            pass


LEDGER = UploadLedger()
