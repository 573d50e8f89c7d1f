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

from specviz.runtime.gguf_blocks import QuantisedMatrix


def _rotary_rows_restored(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K permutation: within each head the rows were stored as (half, pair) and are read back as
    (pair, half), i.e. the rows 2i and 2i + 1 of a head become rows i and i + head_dim / 2."""
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def _parameter_names(model) -> dict[str, str]:
    """GGUF tensor name -> the model's parameter name, for a Llama model (gguf's own name map)."""
    from gguf import MODEL_ARCH, get_tensor_name_map

    name_map = get_tensor_name_map(MODEL_ARCH.LLAMA, model.config.num_hidden_layers)
    ours = {}
    for name in model.state_dict():
        base, _, suffix = name.rpartition(".")
        stored = name_map.get_name(base)
        if stored is not None:
            ours.setdefault(f"{stored}.{suffix}", name)
    return ours


def _rotary_heads(name: str, config) -> int | None:
    """The heads whose rows llama.cpp's converter interleaved in this parameter (None: it did not)."""
    if name.endswith("self_attn.q_proj.weight"):
        return config.num_attention_heads
    if name.endswith("self_attn.k_proj.weight"):
        return config.num_key_value_heads
    return None


def llama_state_dict(path: Path, model) -> dict[str, torch.Tensor]:
    """fp32 tensors by the parameter names of model (a transformers LlamaForCausalLM of the GGUF's config, on the
    meta device will do) for a Llama-architecture GGUF; ValueError for a tensor this mapping does not know."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    config = model.config
    ours = _parameter_names(model)
    state = {}
    for tensor in GGUFReader(str(path)).tensors:
        name = ours.get(tensor.name)
        if name is None:
            raise ValueError(f"{path.name}: tensor {tensor.name} has no place in a Llama model")
        values = dequantize(tensor.data, tensor.tensor_type)
        shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists dimensions fastest first
        weight = torch.from_numpy(np.array(values, dtype=np.float32).reshape(shape))  # a copy: the file is mapped read-only
        heads = _rotary_heads(name, config)
        if heads is not None:
            weight = _rotary_rows_restored(weight, heads)
        state[name] = weight.contiguous()
    if "lm_head.weight" not in state and getattr(config, "tie_word_embeddings", False):
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def _rotary_order(rows: int, heads: int) -> np.ndarray:
    """The row order _rotary_rows_restored applies, as indices into the stored rows."""
    return _rotary_rows_restored(torch.arange(rows), heads).numpy()


def linear_blocks(path: Path, model) -> tuple[dict[str, "QuantisedMatrix"], list[str]]:
    """Each nn.Linear of model (by module name) as the GGUF stores its weight, in the model's row order (q and k
    rows put back as for the float weights; a tied head reads the embedding's blocks), and the names of the linear
    modules whose tensors are of a type the gguf kernel does not read (runtime.gguf_blocks.TYPES)."""
    from gguf import GGUFReader

    from specviz.runtime.gguf_blocks import read_matrix

    config = model.config
    ours = _parameter_names(model)
    found: dict[str, QuantisedMatrix] = {}
    for tensor in GGUFReader(str(path)).tensors:
        name = ours.get(tensor.name)
        if name is None or not name.endswith(".weight"):
            continue
        matrix = read_matrix(tensor)
        if matrix is None:
            continue
        heads = _rotary_heads(name, config)
        if heads is not None:
            matrix = matrix.take_rows(_rotary_order(matrix.out_features, heads))
        found[name[:-len(".weight")]] = matrix
    if "lm_head" not in found and getattr(config, "tie_word_embeddings", False) and "model.embed_tokens" in found:
        found["lm_head"] = found["model.embed_tokens"]
    linears = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return {name: found[name] for name in linears if name in found}, [name for name in linears if name not in found]
