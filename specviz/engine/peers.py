"""The peers we measure against: transformers' own generate(), plain greedy (hf-ar), with prompt lookup
(hf-pld) or with an assistant model (hf-assisted). They run PyTorch's stock linear kernel, as shipped."""

from __future__ import annotations

import time

import torch

from specviz.errors import SpecvizError
from specviz.runtime import fast_linear
from specviz.runtime.loading import LoadedModel


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
