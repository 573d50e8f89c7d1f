"""A Llama GGUF's weights as transformers' state dict, read in one pass.

transformers' GGUF loader reads the file's fields once for the config, once for the tokenizer and once more for the
weights, and builds gguf's tensor-name map again for every tensor: about 12 s of the default model's first load on
the 2-core machines here, paid again at every cold start of a Space (its disk does not persist). Here the file is
read once, the name map built once, each tensor dequantised by gguf itself (as transformers does) and the query and
key rows put back in the order transformers' rotary embedding expects (llama.cpp's converter interleaves each
head's two rotary halves). `tests/test_loading.py` checks the result equals transformers' loader bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def _rotary_rows_restored(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K permutation: within each head the rows were stored as (half, pair) and are read back as
    (pair, half), i.e. the rows 2i and 2i + 1 of a head become rows i and i + head_dim / 2."""
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def llama_state_dict(path: Path, model) -> dict[str, torch.Tensor]:
    """fp32 tensors by the parameter names of model (a transformers LlamaForCausalLM of the GGUF's config, on the
    meta device will do) for a Llama-architecture GGUF; ValueError for a tensor this mapping does not know."""
    from gguf import MODEL_ARCH, GGUFReader, get_tensor_name_map
    from gguf.quants import dequantize

    config = model.config
    name_map = get_tensor_name_map(MODEL_ARCH.LLAMA, config.num_hidden_layers)
    ours = {}
    for name in model.state_dict():
        base, _, suffix = name.rpartition(".")
        stored = name_map.get_name(base)
        if stored is not None:
            ours.setdefault(f"{stored}.{suffix}", name)
    state = {}
    for tensor in GGUFReader(str(path)).tensors:
        name = ours.get(tensor.name)
        if name is None:
            raise ValueError(f"{path.name}: tensor {tensor.name} has no place in a Llama model")
        values = dequantize(tensor.data, tensor.tensor_type)
        shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists dimensions fastest first
        weight = torch.from_numpy(np.array(values, dtype=np.float32).reshape(shape))  # a copy: the file is mapped read-only
        if name.endswith("self_attn.q_proj.weight"):
            weight = _rotary_rows_restored(weight, config.num_attention_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            weight = _rotary_rows_restored(weight, config.num_key_value_heads)
        state[name] = weight.contiguous()
    if "lm_head.weight" not in state and getattr(config, "tie_word_embeddings", False):
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state
