"""What a serving engine should be told for a drafter: each engine's own knobs, chosen under that engine's own
drafting rule from the acceptance by rank a static-tree study measured (engine.static_study; llama.cpp's n-gram
speculation from the prompts' greedy continuations it measured along), priced on a deployment's cost curve, printed as the engine's current release takes them and checked against the rules read from
its code (one module per engine; ENGINES in the order the page lists them)."""

from specviz.serving import llamacpp, medusa, sglang, trtllm, vllm

ENGINES = {module.ENGINE: module for module in (vllm, sglang, trtllm, medusa, llamacpp)}
