"""Serving engines' configs: what a serving engine (vLLM, SGLang, TensorRT-LLM, Medusa, llama.cpp) should be told for
a drafter. Each engine's own knobs, chosen under that engine's own drafting rule from the acceptance by rank a
static-tree study measured (studies.static_study; llama.cpp's n-gram speculation from the prompts' greedy
continuations it measured along), priced on a deployment's cost curve, printed as the engine's current release takes
them and checked against the rules read from its code (one module per engine; ENGINES in the order the page lists
them). Nothing here serves: specviz writes these configs, the engines run them."""

from specviz.engine_configs import llamacpp, medusa, sglang, trtllm, vllm

ENGINES = {module.ENGINE: module for module in (vllm, sglang, trtllm, medusa, llamacpp)}
