"""The peers we measure against: transformers' own generate(), plain greedy (hf-ar), with prompt lookup
(hf-pld) or with an assistant model (hf-assisted). They run PyTorch's stock linear kernel, as shipped. They are
no methods of ours: a bench or the CLI names them beside the methods and runs them here (peer_run), not through
the engine's run path."""

from __future__ import annotations

import time

import torch

from specviz.accept.sampling import SamplingSettings
from specviz.engine.run import RunResult
from specviz.errors import SpecvizError
from specviz.runtime import fast_linear
from specviz.runtime.loading import LoadedModel
from specviz.runtime.prompts import PromptText, encode

PEER_METHODS = {
    "hf-ar": "transformers generate(), greedy, no speculation",
    "hf-pld": "transformers generate(prompt_lookup_num_tokens=10)",
    "hf-assisted": "transformers generate(assistant_model=draft model)",
}


@torch.inference_mode()
def hf_generate(lm: LoadedModel, prompt_ids: list[int], method: str, max_new_tokens: int,
                draft: LoadedModel | None = None) -> dict:
    """Greedy generate() as transformers ships it; steps = target forward passes (counted by a hook)."""
    kwargs = {}
    if method == "hf-ar":
        pass
    elif method == "hf-pld":
        kwargs["prompt_lookup_num_tokens"] = 10
    elif method == "hf-assisted":
        if draft is None:
            raise SpecvizError("hf-assisted needs a draft model (--draft-model).")
        kwargs["assistant_model"] = draft.model
    else:
        raise SpecvizError(f"Unknown peer method '{method}'.")
    calls = []
    hook = lm.model.register_forward_hook(lambda *args: calls.append(1))
    input_ids = torch.tensor([prompt_ids], device=lm.device)
    try:
        with fast_linear.stock():
            started = time.perf_counter()
            out = lm.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                    max_new_tokens=max_new_tokens, eos_token_id=sorted(lm.eos_ids),
                                    pad_token_id=sorted(lm.eos_ids)[0], **kwargs)
            wall_s = time.perf_counter() - started
    finally:
        hook.remove()
    output_ids = out[0, len(prompt_ids):].tolist()
    return {"output_ids": output_ids, "new_tokens": len(output_ids), "steps": len(calls), "wall_s": wall_s}


def peer_run(lm: LoadedModel, method: str, prompt: str | list[dict] | PromptText | None = None, *,
             prompt_ids: list[int] | None = None, params: dict | None = None,
             sampling: SamplingSettings = SamplingSettings(), max_new_tokens: int,
             draft: LoadedModel | None = None) -> RunResult:
    """One peer's run as a RunResult (no step records, margins or trace): greedy only, no parameters."""
    if not sampling.greedy:
        raise SpecvizError(f"{method} runs greedy only here: use temperature 0 (leave it out of a sampled "
                           f"benchmark).")
    if params:
        raise SpecvizError(f"{method} takes no parameters, got {', '.join(sorted(params))}.")
    if prompt_ids is None:
        if prompt is None:
            raise SpecvizError("A run needs a prompt: its text or its token ids.")
        messages = list(prompt.messages) if isinstance(prompt, PromptText) else prompt
        prompt_ids = encode(lm.tokenizer, messages, lm.max_context)
    run = hf_generate(lm, list(prompt_ids), method, max_new_tokens, draft)
    output_ids = run["output_ids"]
    finish = "eos" if output_ids and output_ids[-1] in lm.eos_ids else "length"
    return RunResult(method=method, prompt_ids=list(prompt_ids), output_ids=output_ids,
                     text=lm.tokenizer.decode(output_ids, skip_special_tokens=True), steps=run["steps"],
                     prefill_s=0.0, decode_s=run["wall_s"], finish_reason=finish, lossless_declared=True)
