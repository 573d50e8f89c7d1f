"""The caches sessions rebuilt in this process after travelling without them (runtime.state_pickle), so that the
next session over the same tokens copies their entries instead of running their prefill again. A visitor's state
holds up to three sessions of one model on one prompt (the run, its paired `ar`, the greedy reference), and where
the run is greedy and lossless their outputs are the same tokens too: one prefill instead of three.

A rebuilt cache's first entries never change afterwards (a step appends after the context and compacts only what it
appended), so the entries a later session copies are still those of the tokens remembered with them. One cache per
model is remembered, weakly: a cache whose session is gone is not kept alive for this."""

from __future__ import annotations

import weakref

from specviz.runtime.kv import cache_length, copy_prefix

_last: dict[int, tuple[weakref.ref, weakref.ref, tuple[int, ...]]] = {}  # id(model) -> (model, cache, its tokens)


def remember(lm, cache, tokens: list[int]) -> None:
    """cache holds the entries of tokens (a prefill's), for the next session of lm that rebuilds."""
    _last[id(lm)] = (weakref.ref(lm), weakref.ref(cache), tuple(tokens))


def copy_shared(lm, cache, tokens: list[int]) -> int:
    """Into the empty cache: the remembered entries of lm's last rebuilt cache for the longest prefix of tokens they
    share; how many were copied (0: none remembered, none shared, or a cache this cannot copy)."""
    held = _last.get(id(lm))
    if held is None or held[0]() is not lm:
        return 0
    source, remembered = held[1](), held[2]
    if source is None:
        return 0
    shared = 0
    for mine, theirs in zip(tokens, remembered):
        if mine != theirs:
            break
        shared += 1
    shared = min(shared, cache_length(source))
    if shared == 0 or not copy_prefix(source, cache, shared):
        return 0
    return shared
