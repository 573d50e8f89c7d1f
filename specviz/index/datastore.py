"""READER's long-term datastore: the default model's answers to the project's own prompts
(assets/datastore_corpus.jsonl), tokenised with the target's tokenizer and indexed by a suffix array,
plus the answers generated in this process when a method is asked to grow it (online part).

`python -m specviz datastore build` writes the token file and its suffix array into the cache dir
(one .npz per tokenizer); `Datastore.load` reads it and refuses a missing, empty or corrupt file with
a message that says how to rebuild. The online part is a second, small suffix array rebuilt whenever an
answer is added (the big one never changes at run time).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np

from specviz.runtime.cache_files import discard, write_atomically
from specviz.runtime.cache_dir import cache_root
from specviz.runtime.shared_resources import register_loader, shared
from specviz.errors import SpecvizError
from specviz.index.suffix_array import SEPARATOR, RangeMatch, SuffixArray

ASSETS = Path(__file__).resolve().parents[2] / "assets"
CORPUS = ASSETS / "datastore_corpus.jsonl"
FORMAT = 1
REBUILD_HINT = "rebuild it with `python -m specviz datastore build`"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[-80:]


def datastore_path(tokenizer_name: str) -> Path:
    return cache_root() / "datastore" / f"{_slug(tokenizer_name)}.npz"


def tokenizer_name(lm) -> str:
    """Datastores are per tokenizer: models of one family share one."""
    return f"{getattr(lm.tokenizer, 'name_or_path', '') or lm.name}-{len(lm.tokenizer)}"


def read_corpus(path: Path = CORPUS) -> list[str]:
    if not path.is_file():
        raise SpecvizError(f"The datastore corpus '{path}' is missing (it ships in assets/).")
    texts = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                texts.append(json.loads(line)["response"])
            except (ValueError, KeyError, TypeError) as exc:
                raise SpecvizError(f"{path}:{number} is not a {{\"response\": ...}} line ({exc}).") from None
    return texts


def join_documents(documents: list[list[int]]) -> np.ndarray:
    parts = []
    for ids in documents:
        parts.extend(ids)
        parts.append(SEPARATOR)
    return np.asarray(parts, dtype=np.int64)


def build(lm, corpus: Path = CORPUS, out: Path | None = None) -> dict:
    """Tokenise the corpus, build the suffix array, save both; returns what it did and how long it took."""
    started = time.perf_counter()
    texts = read_corpus(corpus)
    if not texts:
        raise SpecvizError(f"The datastore corpus '{corpus}' holds no responses.")
    documents = [lm.tokenizer(text, add_special_tokens=False).input_ids for text in texts]
    tokens = join_documents(documents)
    index = SuffixArray(tokens)
    out = out or datastore_path(tokenizer_name(lm))
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()[:16]
    meta = json.dumps({"format": FORMAT, "corpus_sha256": digest, "documents": len(documents)})

    def write(staging) -> None:
        with open(staging, "wb") as f:  # a file object: np.savez would add ".npz" to a name
            np.savez(f, tokens=tokens.astype(np.int32), sa=index.sa.astype(np.int32), meta=np.array(meta))

    write_atomically(out, write)
    return {"path": str(out), "documents": len(documents), "tokens": int((tokens >= 0).sum()),
            "build_s": round(time.perf_counter() - started, 3), "file_bytes": out.stat().st_size}


def ensure(lm) -> dict | None:
    """Build the datastore from the shipped corpus when this tokenizer has none yet (seconds); a file
    that exists is left alone (a corrupt one is reported when used, with how to rebuild it)."""
    if datastore_path(tokenizer_name(lm)).is_file():
        return None
    return build(lm)


class Datastore:
    """The static index of a datastore file plus the online part; read-only for sessions except add()."""

    def __init__(self, static: SuffixArray | None, path: Path | None = None, documents: int = 0):
        self.static, self.path, self.documents = static, path, documents
        self.online_documents: list[list[int]] = []
        self.online: SuffixArray | None = None
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path) -> "Datastore":
        if not path.is_file():
            raise SpecvizError(f"No datastore at '{path}': {REBUILD_HINT}.")
        try:
            with np.load(path) as data:
                tokens, sa, meta = data["tokens"], data["sa"], json.loads(str(data["meta"]))
        except Exception as exc:  # a truncated or foreign file: numpy / zipfile / json errors alike
            raise SpecvizError(f"The datastore file '{path}' is unreadable ({type(exc).__name__}): "
                               f"{REBUILD_HINT}.") from None
        if meta.get("format") != FORMAT or len(tokens) != len(sa) or (len(sa) and sa.max() >= len(tokens)):
            raise SpecvizError(f"The datastore file '{path}' is corrupt or of another format: {REBUILD_HINT}.")
        if not (tokens >= 0).any():
            raise SpecvizError(f"The datastore file '{path}' is empty: {REBUILD_HINT}.")
        return cls(SuffixArray(tokens, sa), path, int(meta.get("documents", 0)))

    def __len__(self) -> int:
        """Tokens held (separators excluded)."""
        static = int((self.static.tokens >= 0).sum()) if self.static is not None else 0
        return static + sum(len(d) for d in self.online_documents)

    def indexes(self) -> list[SuffixArray]:
        return [index for index in (self.static, self.online) if index is not None]

    def add(self, tokens: list[int]) -> None:
        """Grow online by one generated answer (the online suffix array is rebuilt: it stays small)."""
        if not tokens:
            return
        with self._lock:
            self.online_documents.append([int(t) for t in tokens])
            self.online = SuffixArray(join_documents(self.online_documents))

    def memory_bytes(self) -> int:
        return sum(index.tokens.nbytes + index.sa.nbytes for index in self.indexes())


def measure_datastore(lm, path: Path | None = None, lookups: int = 2000, key_len: int = 4) -> dict:
    """Load time, size, memory (tracemalloc) and median lookup latency (find + next-token counts of a
    random key taken from the datastore's own text)."""
    path = path or datastore_path(tokenizer_name(lm))
    tracemalloc.start()
    started = time.perf_counter()
    store = Datastore.load(path)
    load_s = time.perf_counter() - started
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rng = np.random.default_rng(0)
    tokens = store.static.tokens
    times = []
    for start in rng.integers(0, len(tokens) - key_len, lookups):
        key = tokens[start:start + key_len].tolist()
        t0 = time.perf_counter()
        found = store.static.match(key, key_len)
        if found is not None:
            store.static.counts(found)
        times.append((time.perf_counter() - t0) * 1e6)
    return {"path": str(path), "documents": store.documents, "tokens": len(store), "load_s": round(load_s, 3),
            "index_bytes": store.memory_bytes(), "traced_bytes": traced,
            "median_lookup_us": round(float(np.median(times)), 1), "key_len": key_len}


__all__ = ["Datastore", "RangeMatch", "build", "datastore_path", "measure_datastore", "tokenizer_name"]


def shared_datastore(lm) -> "Datastore":
    """READER's long-term datastore for the target's tokenizer, loaded once per process (SpecvizError when
    missing or corrupt)."""
    path = datastore_path(tokenizer_name(lm))
    try:
        return shared(("datastore", str(path)))
    except SpecvizError as error:
        if not path.is_file() or not CORPUS.is_file():
            raise
        discard(path, str(error))  # a half-written or foreign file where the shipped corpus's belongs
        build(lm, out=path)
        return shared(("datastore", str(path)))


register_loader("datastore", lambda path: Datastore.load(Path(path)))


