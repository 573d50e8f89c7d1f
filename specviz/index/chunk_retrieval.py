"""RAPID's retrieval: a long document cut into chunks of the target's tokens, ranked against the
question (cosine similarity of sentence embeddings, or BM25), and the best chunks above a threshold
packed into a retrieval budget, then put back in document order: the RAG drafter's compressed context."""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from specviz.errors import SpecvizError

SNAP_WINDOW = 0.25   # a chunk may end this fraction early to end at a paragraph or sentence break


@dataclass(frozen=True)
class Chunk:
    index: int
    start: int          # character offsets in the document
    end: int
    tokens: int         # target tokens in it
    text: str


@dataclass
class Retrieval:
    """What the RAG drafter was given: the chosen chunks in document order and why."""
    chunks: list[Chunk]
    scores: list[float]                 # per chunk of the document
    chosen: list[int] = field(default_factory=list)
    ranker: str = ""
    threshold: float = 0.0
    budget: int = 0
    seconds: float = 0.0                # chunking + embedding + ranking
    note: str = ""

    @property
    def context(self) -> str:
        return "\n\n".join(self.chunks[i].text.strip() for i in self.chosen)

    @property
    def context_tokens(self) -> int:
        return sum(self.chunks[i].tokens for i in self.chosen)

    def summary(self) -> dict:
        return {"ranker": self.ranker, "threshold": self.threshold, "budget": self.budget,
                "chunks": len(self.chunks), "chosen": list(self.chosen), "context_tokens": self.context_tokens,
                "scores": [round(s, 4) for s in self.scores], "seconds": round(self.seconds, 4), "note": self.note,
                "spans": [[c.start, c.end] for c in self.chunks]}


def chunk_document(tokenizer, document: str, chunk_tokens: int) -> list[Chunk]:
    """Consecutive chunks of at most chunk_tokens target tokens, each ending at a paragraph or sentence
    break when one lies in its last quarter (the text of a chunk is a slice of the document)."""
    if not document.strip():
        return []
    offsets = tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    ends = [end for _, end in offsets]
    chunks, first = [], 0
    while first < len(offsets):
        last = min(first + chunk_tokens, len(offsets)) - 1
        if last < len(offsets) - 1:  # not the final chunk: end at the last break in its last quarter
            floor = first + int((1 - SNAP_WINDOW) * (last - first + 1))
            window_start = offsets[floor][0]
            breaks = [m.end() for m in re.finditer(r"\n\s*\n|[.!?]\s", document[window_start:ends[last]])]
            if breaks:
                cut = window_start + breaks[-1]
                last = max([i for i in range(floor, last + 1) if ends[i] <= cut], default=last)
        start_char = offsets[first][0] if first else 0
        end_char = ends[last] if last < len(offsets) - 1 else len(document)
        chunks.append(Chunk(len(chunks), start_char, end_char, last - first + 1, document[start_char:end_char]))
        first = last + 1
    return chunks


_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def bm25_scores(chunks: list[Chunk], question: str, k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 of each chunk for the question's words."""
    docs = [Counter(_words(c.text)) for c in chunks]
    if not docs:
        return []
    mean_len = sum(sum(d.values()) for d in docs) / len(docs)
    scores = []
    for doc in docs:
        length, score = sum(doc.values()), 0.0
        for word in set(_words(question)):
            having = sum(word in d for d in docs)
            if not doc[word]:
                continue
            idf = math.log(1 + (len(docs) - having + 0.5) / (having + 0.5))
            tf = doc[word]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / max(mean_len, 1e-9)))
        scores.append(score)
    return scores


def retrieve(tokenizer, document: str, question: str, chunk_tokens: int, budget: int, threshold: float,
             ranker: str = "minilm", embedder=None) -> Retrieval:
    """Rank the document's chunks for the question and pack the best ones above the threshold (BM25:
    above zero, i.e. sharing a word) into budget tokens; they come back in document order."""
    started = time.perf_counter()
    chunks = chunk_document(tokenizer, document, chunk_tokens)
    if ranker == "minilm":
        if embedder is None:
            raise SpecvizError("ranker 'minilm' needs the sentence embedder.")
        vectors = embedder.embed([question] + [c.text for c in chunks])
        scores = (vectors[1:] @ vectors[0]).tolist() if chunks else []
        floor = threshold
    elif ranker == "bm25":
        scores, floor = bm25_scores(chunks, question), 1e-9
    else:
        raise SpecvizError(f"ranker must be 'minilm' or 'bm25', got {ranker!r}.")
    chosen, used = [], 0
    for i in np.argsort(scores)[::-1].tolist() if scores else []:
        if scores[i] < floor:
            break
        if used + chunks[i].tokens <= budget:
            chosen.append(i)
            used += chunks[i].tokens
    retrieval = Retrieval(chunks, [float(s) for s in scores], sorted(chosen), ranker, threshold, budget,
                          time.perf_counter() - started)
    if not chunks:
        retrieval.note = "no document (the prompt has no text before its last paragraph): the drafter sees the question alone"
    elif not chosen:
        best = max(scores) if scores else 0.0
        reason = (f"no chunk reached similarity {threshold:g} (best {best:.2f})" if ranker == "minilm" and best < floor
                  else "no chunk fits the retrieval budget" if best >= floor else "no chunk shares a word with the question")
        retrieval.note = f"{reason}: the drafter sees the question alone"
    return retrieval
