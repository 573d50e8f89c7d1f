"""The traces shipped in assets/traces: one run per method on a fixed prompt, recorded on this machine, so
that a visitor sees a full, real run at once (replayed with no model) while the model still loads. A new
method records its own (`dev record-traces --methods NAME`); the others' files stay as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from specviz.accept.sampling import SamplingSettings
from specviz.runtime.loading import LoadedModel
from specviz.runtime.prompts import PromptText, encode
from specviz.runtime.draft_model_spec import shared_draft
from specviz.engine.session import Session
from specviz.methods import METHODS
from specviz.studies.suite import load_suite

ASSETS = Path(__file__).resolve().parents[2] / "assets"
COPY_PROMPT = "code-rename"       # copied code: every drafting source has something to show
LONG_PROMPT = "lc-ferry-2"        # a document question: rapid's RAG drafter
# (method, suite id, temperature, params): rapid samples (eta > 0 needs a temperature), with its ar twin
RECORDINGS = [*((m, COPY_PROMPT, 0.0, {}) for m in METHODS if m != "rapid"),
              ("rapid", LONG_PROMPT, 0.8, {"eta": 10.0}), ("ar", LONG_PROMPT, 0.8, {})]


def record_traces(lm: LoadedModel, out: Path = ASSETS / "traces", max_new_tokens: int = 96,
                  log: Callable[[str], None] = print, methods: list[str] | None = None) -> list[Path]:
    """Record the traces of `methods` (None: every method), replacing those files and leaving the others as they
    are (a new method records its own alone); returns their paths."""
    from specviz.errors import SpecvizError
    from specviz.index import datastore

    unknown = sorted(set(methods or ()) - set(METHODS))
    if unknown:
        raise SpecvizError(f"Unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}.")

    datastore.ensure(lm)  # built once per tokenizer: a recording must not time that build as a step
    suite = {item.id: item for item in load_suite(ASSETS / "suite.jsonl")}
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for method, prompt_id, temperature, params in RECORDINGS:
        if methods is not None and method not in methods:
            continue
        item = suite[prompt_id]
        draft = shared_draft(lm, "") if METHODS[method].uses_draft_model else None
        prompt_ids = encode(lm.tokenizer, item.messages, lm.max_context)
        text = None if item.is_chat else PromptText.of(item.prompt)
        for tokens in (4, max_new_tokens):  # a short warm-up run first: one-time costs are no step's
            session = Session(lm, method, params, sampling=SamplingSettings(temperature), draft=draft)
            session.start_ids(prompt_ids, text)
            session.run(tokens)
        _ = session.cost_model  # the trace carries the verify cost curve for the "why a tree pays" plot
        suffix = f"-t{temperature:g}" if temperature else ""
        path = out / f"{method}-{prompt_id}{suffix}.json"
        session.trace().save(path)
        stats = session.stats()
        log(f"{path.name}: {stats.steps} steps, {stats.new_tokens} tokens, MAT {stats.mean_accepted:.2f}, "
            f"{path.stat().st_size / 1024:.0f} KB")
        paths.append(path)
    return paths
