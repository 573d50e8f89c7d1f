"""Where the project caches what it builds: dequantised weights, cost curves, native kernels, the datastore."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where dequantised weights and the calibrated cost curve live (SPECVIZ_CACHE overrides)."""
    if os.environ.get("SPECVIZ_CACHE"):
        return Path(os.environ["SPECVIZ_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "specviz"
