"""The method registry: one module per paper, one class per method."""

from __future__ import annotations

from specviz.errors import SpecvizError, quoted
from specviz.methods.base import Method
from specviz.methods.baseline import PlainDecoding, PromptLookup
from specviz.methods.racer import Racer, RacerLogits, RacerRetrieval
from specviz.methods.rapid import Rapid
from specviz.methods.reader import Reader
from specviz.methods.respec import ReSpec
from specviz.methods.suffix import Suffix
from specviz.methods.unified import Unified

METHODS: dict[str, type[Method]] = {m.name: m for m in (
    PlainDecoding, PromptLookup, Racer, RacerLogits, RacerRetrieval, ReSpec, Reader, Unified, Rapid, Suffix)}

Unified.merge(m for m in METHODS.values() if m.mergeable)  # unified can merge every retrieval method's source

DEFAULT_METHOD = "unified"  # what the app shows first and a link without method= means (issue 9: at least
# as fast as racer on both suites)

def get_method(name: str) -> type[Method]:
    if name not in METHODS:
        raise SpecvizError(f"Unknown method {quoted(name)}; choose one of {', '.join(METHODS)}.")
    return METHODS[name]


__all__ = ["DEFAULT_METHOD", "METHODS", "Method", "get_method"]
