"""RACER's automaton size after a long real generation."""

from __future__ import annotations

from specviz.runtime.loading import LoadedModel
from specviz.engine.run import run_method
from specviz.studies.suite import SuiteItem
from specviz.methods import get_method
from specviz.benches.suite_bench import params_for


def automaton_memory(lm: LoadedModel, suite: list[SuiteItem], generated_tokens: int, params: dict | None = None,
                     per_prompt: int = 256) -> dict:
    """RACER's automaton after `generated_tokens` tokens of real output: racer generates on the suite's
    prompts in turn (up to per_prompt tokens each) until that many tokens exist; one automaton with
    racer's settings is then fed every prompt and output in order, as a long session's drafter would be.
    Its size is reported as nodes, the tables' own count (memory_bytes) and what tracemalloc saw it
    allocate."""
    import gc
    import tracemalloc

    from specviz.index.automaton import NgramAutomaton

    own = params_for("racer", params or {})
    values = get_method("racer").resolve_params(own)
    streams, generated = [], 0
    while generated < generated_tokens:
        for item in suite:
            run = run_method(lm, "racer", item.messages, params=own,
                             max_new_tokens=min(per_prompt, generated_tokens - generated))
            streams.append(run.prompt_ids + run.output_ids)
            generated += run.new_tokens
            if generated >= generated_tokens:
                break
    gc.collect()
    tracemalloc.start()
    automaton = NgramAutomaton(values["ngram_length"], values["capacity"])
    for stream in streams:
        automaton.feed(stream)
    automaton.build_failure_links()
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"generated_tokens": generated, "stream_tokens": sum(len(s) for s in streams),
            "ngram_length": values["ngram_length"], "capacity": values["capacity"], "nodes": len(automaton),
            "evicted": automaton.evicted, "table_bytes": automaton.memory_bytes(), "traced_bytes": traced}
