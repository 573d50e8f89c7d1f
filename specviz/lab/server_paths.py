"""Messages a public Space shows name no server path: where its caches, code, home or temporary files are is
nobody's business, and a path tells an attacker what to aim at. Each known root becomes a short label; any other
absolute path of two parts or more becomes <server path>."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from specviz.runtime.cache_dir import cache_root

# an absolute path of at least two parts, not inside a URL ("https://host/a/b") or a ratio ("tokens/s")
ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~>-])/(?:[\w.@+-]+/)+[\w.@+-]*")


def _roots() -> list[tuple[str, str]]:
    roots = [(cache_root(), "<cache>"), (Path(__file__).resolve().parents[2], "<app>"),
             (Path(sys.prefix), "<python>"), (Path(tempfile.gettempdir()), "<tmp>"), (Path.home(), "~")]
    # longest first: a cache under the home folder is named as the cache
    return sorted(((str(p), label) for p, label in roots if str(p) not in ("/", "")), key=lambda r: -len(r[0]))


def hide_server_paths(text: str) -> str:
    """text with every server path replaced by its label."""
    if not text or "/" not in text:
        return text
    for root, label in _roots():
        text = text.replace(root, label)
    return ABSOLUTE_PATH.sub("<server path>", text)
