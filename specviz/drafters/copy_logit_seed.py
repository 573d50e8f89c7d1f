"""A warm start for RACER's copy-logit table, seeded once per model from a text.

A fresh table is cold: until a token has occurred in this generation its row is empty, so an open-ended
prompt drafts nothing from logits for its first steps (Token Recycling keeps its table across requests
for this reason). Here the target reads the first SEED_TOKENS tokens of the datastore corpus once; the
top-k rows it leaves are saved in the cache folder and every session that asks for a warm table starts
from a copy of them (its own prompt and output then overwrite rows as usual). A copy, not a table
shared by all sessions: runs stay reproducible and browser sessions never see each other's text.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from specviz.runtime.cache_files import LOG, discard, write_atomically
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.kv import new_cache
from specviz.runtime.cache_dir import cache_root
from specviz.runtime.shipped import COPY_LOGITS, shipped_file
from specviz.runtime.shared_resources import register_loader, resolve, shared
from specviz.drafters.copy_logit_table import CopyLogitTable, FrozenRows
from specviz.errors import SpecvizError
from specviz.index.datastore import CORPUS, read_corpus, tokenizer_name, _slug

SEED_TOKENS = 8192   # about 30 of the corpus' answers; reading them takes a few seconds on a CPU
SEED_WIDTH = 16      # the largest max_breadth a method may ask for
CHUNK = 512
FORMAT = 1


def seed_path(lm):
    return cache_root() / "copy_logits" / f"{_slug(tokenizer_name(lm) + '-' + lm.name)}-{FORMAT}.npz"


@torch.inference_mode()
def build(lm, corpus=CORPUS, tokens: int = SEED_TOKENS) -> CopyLogitTable:
    """Read the corpus' documents with the target until `tokens` tokens, keeping every token's last row."""
    table = CopyLogitTable(SEED_WIDTH)
    read = 0
    for text in read_corpus(corpus):
        ids = lm.tokenizer.encode(text, add_special_tokens=False)[:tokens - read]
        cache = new_cache(lm.model.config)
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            logits = causal_forward(lm, cache, chunk)
            table.store(chunk, logits)
        read += len(ids)
        if read >= tokens:
            break
    if not table.rows:
        raise SpecvizError(f"The corpus '{corpus}' holds no text to seed the copy-logit table from.")
    return table


def save(table: CopyLogitTable, path) -> None:
    rows = table.frozen()

    def write(staging) -> None:
        with open(staging, "wb") as f:  # a file object: np.savez would add ".npz" to a name
            np.savez(f, top_tokens=rows.top_tokens.astype(np.int32), top_probs=rows.top_probs, seen=rows.seen)

    write_atomically(path, write)


def load(path) -> CopyLogitTable:
    try:
        with np.load(path) as data:
            rows = FrozenRows(data["top_tokens"].astype(np.int32), data["top_probs"].astype(np.float32),
                              data["seen"].astype(bool))
            table = CopyLogitTable(int(rows.top_tokens.shape[1]), rows)
    except (OSError, ValueError, KeyError) as exc:
        raise SpecvizError(f"The copy-logit seed '{path}' is unreadable ({exc}); delete it to rebuild it.") from None
    return table


def ensure(lm) -> tuple[CopyLogitTable, float]:
    """The model's seed table (built and saved on first use) and the seconds that took."""
    path = seed_path(lm)
    started = time.perf_counter()
    shipped = shipped_file(COPY_LOGITS, path.name)  # a Space bundle's copy (runtime.shipped), read-only
    if shipped is not None and not path.is_file():
        try:
            return load(shipped), time.perf_counter() - started
        except SpecvizError as error:
            LOG.warning("the shipped copy-logit seed %s is not used: %s", shipped, error)
    if path.is_file():
        try:
            return load(path), time.perf_counter() - started
        except SpecvizError as error:
            discard(path, str(error))  # a broken cache file is rebuilt, never trusted
    table = build(lm)
    save(table, path)
    return table, time.perf_counter() - started


def shared_copy_logit_seed(lm):
    """The model's warm copy-logit table: built from the datastore corpus on first use and cached on disk,
    loaded once per process; every session starts from a copy."""
    if lm.shared_key is not None:
        return shared(("copy-logit-seed", lm.shared_key))
    return shared(("copy-logit-seed", id(lm.model)), lambda: ensure(lm)[0])


register_loader("copy-logit-seed", lambda model: ensure(resolve(model))[0])
