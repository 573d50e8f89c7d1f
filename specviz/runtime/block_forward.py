"""A block of tokens through a loaded model in one pass: each token at its own position, attending to
the cache and to the block's tokens its row of a visibility mask allows (a draft tree, a chain, a prompt).

Asked for `features`, a forward also returns what the model's head reads at every position: the final
norm's output (n, hidden) in fp32, or the hidden states a FeatureTap names (runtime.feature_tap: EAGLE-3's three
layers). A draft head (runtime.draft_head, runtime.eagle_head) drafts from them; the lean decoder has them for
free, transformers' stack gives them as its base model's hidden states."""

from __future__ import annotations

import torch

from specviz.runtime.feature_tap import tap_of
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.masks import additive_mask
from specviz.runtime.static_kv import StaticKV


def _stock_with_features(lm: LoadedModel, features, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' forward split at the head: (logits, the tap's features), both (q, ...) in fp32. Its
    hidden_states[i] is what enters layer i (0: the embeddings), a tap's convention."""
    tap = tap_of(features)
    out = lm.model.get_decoder()(**inputs, output_hidden_states=not tap.final)
    hidden = out.last_hidden_state
    logits = lm.model.get_output_embeddings()(hidden)[0].float()
    if tap.final:
        return logits, hidden[0].float()
    return logits, torch.cat([out.hidden_states[i][0].float() for i in tap.layers], dim=-1)


@torch.inference_mode()
def masked_forward(lm: LoadedModel, cache, tokens: list[int], positions: list[int],
                   visible: torch.Tensor, features: bool = False):
    """Logits (q, vocab) in fp32 of q tokens at the given positions, each attending to the cache entries
    and new tokens its row of visible (q, cache + q) allows; the cache grows by q entries. Runs the
    model's lean decoder where it has one, else transformers' forward. features: return (logits, features)."""
    if isinstance(cache, StaticKV):
        raise TypeError("a static cache's forwards are the verifier's (engine.tree_forward, causal_forward)")
    device = lm.device
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    position_ids = torch.tensor([positions], dtype=torch.long, device=device)
    mask = additive_mask(visible.to(device), lm.dtype)
    if lm.decoder is not None:
        return lm.decoder(input_ids, position_ids, mask[0, 0], cache, features)
    inputs = dict(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, past_key_values=cache,
                  use_cache=True)
    if features:
        return _stock_with_features(lm, features, **inputs)
    return lm.model(**inputs).logits[0].float()


def chain_forward(lm: LoadedModel, cache, tokens: list[int], past: int) -> torch.Tensor:
    """Logits (q, vocab) of tokens appended at positions past.., each seeing the cache and every token before it,
    through masked_forward: the path every draft model takes (self-skip:K's first layers have no other)."""
    visible = torch.ones((len(tokens), past + len(tokens)), dtype=torch.bool).tril(past)
    return masked_forward(lm, cache, tokens, list(range(past, past + len(tokens))), visible)


@torch.inference_mode()
def causal_forward(lm: LoadedModel, cache, tokens: list[int], features: bool = False):
    """Logits (q, vocab) in fp32 of q tokens appended to the cache in order, each seeing all before it
    (a prefill chunk), through transformers' forward (the model's own causal mask). features: return
    (logits, features). A static cache's chunk runs through its verifier (runtime.captured_forward)."""
    if isinstance(cache, StaticKV):
        return lm.verifier.prefill(cache, tokens, features)
    if lm.quantised and lm.decoder is not None:
        # the gguf mode's prefill on the blocks too: its quantised kernel is compute-bound from a few rows, where the
        # modules' fp32 kernel takes twice its time over a prompt (docs/benchmarks.md, "The gguf mode")
        past = cache.get_seq_length()
        visible = torch.ones((len(tokens), past + len(tokens)), dtype=torch.bool).tril(past)
        return masked_forward(lm, cache, tokens, list(range(past, past + len(tokens))), visible, features)
    ids = torch.tensor([tokens], dtype=torch.long, device=lm.device)
    if features:
        return _stock_with_features(lm, features, input_ids=ids, past_key_values=cache, use_cache=True)
    return lm.model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0].float()


def causal_features(lm: LoadedModel, tokens: list[int], features=True, chunk: int = 512) -> torch.Tensor:
    """The target's features (n, width) fp32 of tokens run in order from an empty cache, in chunks, as a session's
    prefill gives them (features: True or a FeatureTap): what a draft head is fed in the offline probes."""
    from specviz.runtime.kv import new_cache

    cache, parts = new_cache(lm.model.config), []
    for start in range(0, len(tokens), chunk):
        parts.append(causal_forward(lm, cache, tokens[start:start + chunk], features)[1])
    return torch.cat(parts)
