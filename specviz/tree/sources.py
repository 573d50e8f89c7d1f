"""Draft sources: an open registry. A source is who proposed a draft node; each belongs to one of the
three families the app's legend groups by (`logits`, `retrieval`, `model`) and has its own colour and
legend text. A new source is one `register(...)` call: the tree, the figures and the CSS read this table.
The colours are Okabe-Ito's palette (told apart by the common colour-vision deficiencies); yellow, sky blue
and black are left for the views' marks (relaxed, transferred, the bonus token)."""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("logits", "retrieval", "model")


@dataclass(frozen=True)
class Source:
    name: str
    family: str
    colour: str
    legend: str


SOURCES: dict[str, Source] = {}


def register(name: str, family: str, colour: str, legend: str) -> Source:
    if family not in FAMILIES:
        raise ValueError(f"source family must be one of {FAMILIES}, got {family!r}")
    SOURCES[name] = Source(name, family, colour, legend)
    return SOURCES[name]


def is_source(name: str) -> bool:
    return name in SOURCES


def colour(name: str) -> str:
    return SOURCES[name].colour


register("logits", "logits", "#0072B2", "copy-logit logits tree (RACER)")
register("retrieval", "retrieval", "#E69F00", "n-gram retrieval of prompt + output (RACER's automaton, "
                                               "ReSpec's match positions, prompt lookup)")
register("model", "model", "#009E73", "a draft language model (ReSpec's fallback, READER's speculator)")
register("search", "retrieval", "#D55E00", "READER widening: one deep branch searched in the short-term "
                                           "trie + long-term datastore")
register("deepen", "retrieval", "#CC79A7", "READER deepening: a searched branch seeded from the draft "
                                           "model's best prefix")
