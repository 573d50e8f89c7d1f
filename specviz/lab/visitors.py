"""Browser sessions' objects by Gradio session, so that a session that disconnects frees its KV caches at
once: Gradio keeps a disconnected session's state for an hour, and gr.State's time_to_live only covers
sessions that stay connected. Weak references: the registry never keeps anything alive.

Each session's downloads (traces, tree SVGs, sweep CSVs) are written in a folder of its own, capped in size
(the oldest files go first) and removed with the session."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

_open: dict[str, list[weakref.ref]] = {}
_lock = threading.Lock()
_folders: dict[str, Path] = {}
_FILES_ROOT: list[Path] = []   # made on first use, one per process
SHARED_KEY = "no-session"      # downloads of a call that carries no session (a test calling the handler directly)
# a session folder untouched this long goes when the next one is made: a client that never closes its tab (an API
# caller) never sends the event that removes its folder
FOLDER_MAX_AGE_S = 2 * 3600
# every session's downloads together (None: no limit; public mode sets one, lab.fair_share.enforce)
TOTAL_FILES_BYTES: list[int | None] = [None]
# what else goes when a session is released, by its hash: Gradio's own state of it (panels.gradio_sessions)
RELEASE_HOOKS: list = []


def register(session_hash: str | None, *objects) -> None:
    if not session_hash:
        return
    with _lock:
        known = [r for r in _open.get(session_hash, []) if r() is not None]
        known += [weakref.ref(o) for o in objects if all(r() is not o for r in known)]
        _open[session_hash] = known


def session_object(session_hash: str | None, kind: type, make: Callable[[], object]) -> tuple[object, bool]:
    """The session's registered object of this kind, else one made now and registered; and whether it was made
    here. Two events of one session can both arrive before either has written the session's state (a click on
    the first paint while the page's load event is still queued): both get the same object, so the later reply
    never replaces what the earlier did to it."""
    if not session_hash:
        return make(), True
    with _lock:
        found = _registered(session_hash, kind)
    if found is not None:
        return found, False
    made = make()  # outside the lock: opening the first visit's recording reads a file
    with _lock:
        found = _registered(session_hash, kind)
        if found is None:
            _open.setdefault(session_hash, []).append(weakref.ref(made))
    return (found, False) if found is not None else (made, True)


def _registered(session_hash: str, kind: type):
    """The session's live registered object of this kind, or None; call with the lock held."""
    return next((o for o in (r() for r in _open.get(session_hash, [])) if isinstance(o, kind)), None)


def release(session_hash: str | None) -> int:
    """Release (obj.release()) what a disconnected session held, its downloads and its uploads; how many objects
    that was."""
    from specviz.lab.upload_ledger import LEDGER

    with _lock:
        refs = _open.pop(session_hash or "", [])
        folder = _folders.pop(session_hash or "", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    LEDGER.release_session(session_hash)
    objects = [r() for r in refs if r() is not None]
    for obj in objects:
        obj.release()
    for hook in RELEASE_HOOKS:
        hook(session_hash)
    return len(objects)


def release_holder(obj) -> int:
    """One of a session's objects expired (gr.State's time to live counts from its last change, so a session's
    A/B state can expire while its Lab is in use): release that object alone and forget it; the session's folder
    goes once nothing of the session is left. How many objects were released (1)."""
    with _lock:
        emptied = []
        for key, refs in list(_open.items()):
            kept = [r for r in refs if r() is not None and r() is not obj]
            if len(kept) != len(refs):
                _open[key] = kept
                if not kept:
                    emptied.append(key)
        folders = [_folders.pop(key, None) for key in emptied]
        for key in emptied:
            _open.pop(key, None)
    for folder in folders:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    obj.release()
    return 1


def open_sessions() -> int:
    with _lock:
        return len(_open)


def files_folder(session_hash: str | None) -> Path:
    """The session's own folder for what it downloads (made on first use, removed by release)."""
    key = session_hash or SHARED_KEY
    with _lock:
        if not _FILES_ROOT:
            _FILES_ROOT.append(Path(tempfile.mkdtemp(prefix="specviz-downloads-")))
        folder = _folders.get(key)
        if folder is None or not folder.is_dir():
            _remove_stale_folders()
            folder = Path(tempfile.mkdtemp(prefix="session-", dir=_FILES_ROOT[0]))
            _folders[key] = folder
    return folder


def _remove_stale_folders() -> None:
    """Session folders whose newest change is older than FOLDER_MAX_AGE_S; call with the lock held."""
    now = time.time()
    for key, folder in list(_folders.items()):
        try:
            newest = max([folder.stat().st_mtime, *(f.stat().st_mtime for f in folder.iterdir())])
        except OSError:
            newest = 0.0
        if now - newest > FOLDER_MAX_AGE_S:
            shutil.rmtree(folder, ignore_errors=True)
            _folders.pop(key, None)


def keep_within(folder: Path, max_bytes: int | None) -> None:
    """Remove the folder's oldest files until what is left takes at most max_bytes (the newest always stays),
    then every session's oldest files until all of them take at most TOTAL_FILES_BYTES (files younger than
    FRESH_S stay: another session may be about to hand one to its browser)."""
    with _lock:  # one trim at a time: another session's trim or release may be removing these files
        if max_bytes is not None:
            _trim(_oldest_first(folder.glob("*")), max_bytes)
        total_limit = TOTAL_FILES_BYTES[0]
        if total_limit is not None and _FILES_ROOT:
            _trim(_oldest_first(_FILES_ROOT[0].glob("*/*")), total_limit, keep_after=time.time() - FRESH_S)


FRESH_S = 60


def _oldest_first(paths) -> list[tuple[Path, int, float]]:
    """(file, size, mtime) of the plain files among paths, oldest first; a file gone meanwhile is left out."""
    found = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        if path.is_file():
            found.append((path, stat.st_size, stat.st_mtime))
    return sorted(found, key=lambda entry: entry[2])


def _trim(files: list[tuple[Path, int, float]], max_bytes: int, keep_after: float | None = None) -> None:
    """Unlink the oldest of files until the rest take at most max_bytes; the newest stays, and so does any file
    changed after keep_after."""
    total = sum(size for _, size, _ in files)
    for path, size, mtime in files[:-1]:
        if total <= max_bytes or (keep_after is not None and mtime > keep_after):
            break
        total -= size
        path.unlink(missing_ok=True)
