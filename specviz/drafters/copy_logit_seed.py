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


def shipped_name(lm) -> str:
    """The file name a shipped table goes by (the repository's assets/trained/, a Space bundle): the model's name
    and vocabulary size, never a path of the machine that built it."""
    return f"{_slug(lm.name)}-{len(lm.tokenizer)}-{FORMAT}.npz"


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


def save(table: CopyLogitTable, path, vocab_sha256: str = "", half: bool = False) -> None:
    """The table's rows, with the digest of the vocabulary they index (checked on load); half: probabilities in
    float16 and compressed (the shipped copy: a third of the bytes; the drafts' order is the same, and a draft's
    probability only ranks it, never decides acceptance)."""
    rows = table.frozen()

    def write(staging) -> None:
        with open(staging, "wb") as f:  # a file object: np.savez would add ".npz" to a name
            (np.savez_compressed if half else np.savez)(
                f, top_tokens=rows.top_tokens.astype(np.int32),
                top_probs=rows.top_probs.astype(np.float16 if half else np.float32), seen=rows.seen,
                vocab_sha256=np.array(vocab_sha256))

    write_atomically(path, write)


def load(path, lm=None) -> CopyLogitTable:
    """The table in path; with lm, refused (SpecvizError) unless its rows are lm's vocabulary."""
    try:
        with np.load(path) as data:
            rows = FrozenRows(data["top_tokens"].astype(np.int32), data["top_probs"].astype(np.float32),
                              data["seen"].astype(bool))
            digest = str(data["vocab_sha256"]) if "vocab_sha256" in data.files else ""
            table = CopyLogitTable(int(rows.top_tokens.shape[1]), rows)
    except (OSError, ValueError, KeyError) as exc:
        raise SpecvizError(f"The copy-logit seed '{path}' is unreadable ({exc}); delete it to rebuild it.") from None
    if lm is not None:
        from specviz.runtime.draft_head import vocab_digest

        vocab = rows.seen.shape[0]
        foreign = digest and digest != vocab_digest(lm.tokenizer)
        out_of_range = vocab and (int(rows.top_tokens.min()) < 0 or int(rows.top_tokens.max()) >= vocab)
        if vocab != lm.vocab_size or rows.top_tokens.shape[0] != vocab or foreign or out_of_range:
            raise SpecvizError(f"The copy-logit seed '{path}' was built for another vocabulary than {lm.name}'s.")
    return table


def ensure(lm) -> tuple[CopyLogitTable, float]:
    """The model's seed table (shipped, else built and saved on first use) and the seconds that took."""
    path = seed_path(lm)
    started = time.perf_counter()
    # the repository's or a Space bundle's copy (runtime.shipped), read-only; a bundle of older versions named
    # it like the cache file
    shipped = shipped_file(COPY_LOGITS, shipped_name(lm)) or shipped_file(COPY_LOGITS, path.name)
    if shipped is not None and not path.is_file():
        try:
            return load(shipped, lm), time.perf_counter() - started
        except SpecvizError as error:
            LOG.warning("the shipped copy-logit seed %s is not used: %s", shipped, error)
    if path.is_file():
        try:
            return load(path, lm), time.perf_counter() - started
        except SpecvizError as error:
            discard(path, str(error))  # a broken cache file is rebuilt, never trusted
    from specviz.runtime.draft_head import vocab_digest

    table = build(lm)
    save(table, path, vocab_digest(lm.tokenizer))
    return table, time.perf_counter() - started


def shared_copy_logit_seed(lm):
    """The model's warm copy-logit table: built from the datastore corpus on first use and cached on disk,
    loaded once per process; every session starts from a copy."""
    if lm.shared_key is not None:
        return shared(("copy-logit-seed", lm.shared_key))
    return shared(("copy-logit-seed", id(lm.model)), lambda: ensure(lm)[0])


register_loader("copy-logit-seed", lambda model: ensure(resolve(model))[0])
