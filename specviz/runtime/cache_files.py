"""Cache files written whole or not at all, and read back or rebuilt.

A cache (the dequantised model, the datastore, the copy-logit seed, cost curves, kernel choices, the draft
head) is written into a temporary sibling whose name is unique to the process and thread, then renamed over
its target: a reader never sees half a file, and two writers never write into one. A cache that cannot be read
back (a disk that filled up, a crash of an older version, a foreign file) is discarded and rebuilt, and the log
says so."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

LOG = logging.getLogger("specviz.cache")


def staging_path(target: Path) -> Path:
    """A temporary sibling of target, unique to this process and thread (a hidden name: nothing lists it)."""
    return target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def write_atomically(target: Path, write: Callable[[Path], None]) -> Path:
    """write(path) into a staging sibling, then rename it over target; on failure nothing is left behind."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(target)
    try:
        write(staging)
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return target


def write_folder_atomically(target: Path, write: Callable[[Path], None]) -> Path:
    """write(folder) into a staging sibling folder, then put it in target's place (an existing target is moved
    aside first and removed after): a reader finds the old folder or the new one whole, never a mix; on failure
    nothing is left behind."""
    import shutil

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging, old = staging_path(target), target.with_name(f".{target.name}.{os.getpid()}.old")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        write(staging)
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return target


def discard(target: Path, why: str) -> None:
    """A cache that could not be read back: removed (to be rebuilt), with a line in the log."""
    LOG.warning("discarding the cache %s (%s): it is rebuilt", target, why)
    Path(target).unlink(missing_ok=True)
