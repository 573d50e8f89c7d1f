"""A published EAGLE head (runtime.eagle_files) bound to its target, with the draft head's interface
(runtime.draft_head.DraftHead's forward, new_cache and draft vocabulary), so the head's drafter
(drafters.head) grows its trees, static trees and rank probes with it.

One forward of n head positions, in the target's dtype on its device, written out with explicit tensors:

    EAGLE-1/2:  x = fc([embed(token); f])                 f: the target's final-norm feature or the head's own
                h = x + attn(x)                           (layer 0 has no input norm)
                h = h + mlp(post_norm(h));  logits = target_head(h);  next f = h
    EAGLE-3:    f = fc(f) where f is the target's fused feature (3 x its width); the head's own is used as is
                h = f + attn([input_norm(embed(token)); hidden_norm(f)])
                h = h + mlp(post_norm(h));  logits = lm_head(norm(h)) over its draft vocabulary;  next f = h

Positions are EAGLE's: a head position pairs the token at context index t + 1 with the feature at t and sits
at rotary position t (our trained head uses t + 1; attention only sees differences)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specviz.runtime.eagle_files import EAGLE_SPEC, EagleFiles, EagleLayout, read_eagle
from specviz.runtime.loaded_model import LoadedModel


class EagleHead:
    """Read-only and shared by every session, as a DraftHead is."""

    def __init__(self, lm: LoadedModel, files: EagleFiles):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        # not the files themselves: their weights dict would keep a host copy of every weight for good
        self.lm, self.layout = lm, files.layout
        self.name = f"{EAGLE_SPEC}:{files.source}"
        self.feature_tap = files.tap
        g = files.geometry
        self.geometry = g
        device, dtype = lm.device, lm.dtype
        prefix = "midlayer." if files.layout is EagleLayout.EAGLE3 else "layers.0."
        take = lambda key: files.weights[key].to(device, dtype).contiguous()  # noqa: E731
        self.w = {part: take(f"{prefix}{part}.weight") for part in
                  ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "post_attention_layernorm")}
        self.fc = take("fc.weight")
        self.fc_bias = take("fc.bias") if "fc.bias" in files.weights else None
        if files.layout is EagleLayout.EAGLE3:
            self.input_norm, self.hidden_norm = take("midlayer.input_layernorm.weight"), take("midlayer.hidden_norm.weight")
            self.norm, self.head = take("norm.weight"), take("lm_head.weight")
        else:  # the target's own head reads the layer's output
            self.norm, self.head = None, lm.model.get_output_embeddings().weight.detach()
        own_embedding = files.weights.get("embed_tokens.weight")
        self.embedding = own_embedding.to(device, dtype) if own_embedding is not None else \
            lm.model.get_input_embeddings().weight.detach()
        rope = {"max_position_embeddings": max(lm.max_context, 2048), **g.rope}
        self.config = LlamaConfig(hidden_size=g.hidden, num_attention_heads=g.heads, num_key_value_heads=g.kv_heads,
                                  head_dim=g.head_dim, intermediate_size=g.intermediate, num_hidden_layers=1,
                                  rms_norm_eps=g.eps, vocab_size=lm.vocab_size, **rope)
        self.rotary = LlamaRotaryEmbedding(self.config).to(device)
        self.draft_ids = files.draft_ids.to(device)
        self.draft_ids_list: list[int] = files.draft_ids.tolist()
        self.draft_ids_cpu = files.draft_ids.cpu()
        self.draft_index = {token: i for i, token in enumerate(self.draft_ids_list)}
        self.feature_width = files.tap.width(int(lm.model.config.hidden_size))

    @property
    def size(self) -> int:
        """Weights a draft level reads: fc, the layer and the head it drafts through."""
        return self.fc.numel() + sum(w.numel() for w in self.w.values()) + self.head.numel()

    def new_cache(self):
        from specviz.runtime.kv import new_cache

        return new_cache(self.config)

    def _rmsnorm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return weight * (x.float() * torch.rsqrt(variance + self.geometry.eps)).to(x.dtype)

    @torch.inference_mode()
    def forward(self, features: torch.Tensor, tokens: list[int], positions: list[int], visible: torch.Tensor,
                cache) -> tuple[torch.Tensor, torch.Tensor]:
        """DraftHead.forward's contract: features (n, width) of the target (its tap's width) or of the head's
        own earlier positions (hidden wide); logits over the draft vocabulary (n, draft_vocab) fp32 and the
        predicted features (n, hidden) fp32; the cache grows by n."""
        g, device, dtype = self.geometry, self.lm.device, self.lm.dtype
        n = len(tokens)
        f = features.to(device, dtype)
        embedded = self.embedding[torch.tensor(tokens, dtype=torch.long, device=device)]
        if self.layout is EagleLayout.EAGLE1:
            x = F.linear(torch.cat([embedded, f], dim=-1), self.fc, self.fc_bias)
            residual, attention_in = x, x
        else:
            if f.shape[-1] == self.fc.shape[1]:  # the target's fused layers; the head's own features are hidden wide
                f = F.linear(f, self.fc)
            residual = f
            attention_in = torch.cat([self._rmsnorm(embedded, self.input_norm), self._rmsnorm(f, self.hidden_norm)], -1)
        w = self.w
        q = F.linear(attention_in, w["self_attn.q_proj"]).view(1, n, g.heads, g.head_dim).transpose(1, 2)
        k = F.linear(attention_in, w["self_attn.k_proj"]).view(1, n, g.kv_heads, g.head_dim).transpose(1, 2)
        v = F.linear(attention_in, w["self_attn.v_proj"]).view(1, n, g.kv_heads, g.head_dim).transpose(1, 2)
        position_ids = torch.tensor([[max(0, p - 1) for p in positions]], dtype=torch.long, device=device)
        cos, sin = self.rotary(v, position_ids)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        keys, values = cache.layers[0].update(k, v)
        groups = g.heads // g.kv_heads
        if groups > 1:
            keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible.to(device)[None, None])
        h = residual + F.linear(attended.transpose(1, 2).reshape(n, g.heads * g.head_dim), w["self_attn.o_proj"])
        x = self._rmsnorm(h, w["post_attention_layernorm"])
        h = h + F.linear(F.silu(F.linear(x, w["mlp.gate_proj"])) * F.linear(x, w["mlp.up_proj"]), w["mlp.down_proj"])
        read = h if self.norm is None else self._rmsnorm(h, self.norm)
        return F.linear(read, self.head).float(), h.float()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (Llama's rotate-half convention); x (1, heads, n, head_dim), cos/sin (1, n, head_dim)."""
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def load_eagle(lm: LoadedModel, location: str) -> EagleHead:
    """The EAGLE head at location checked against lm (SpecvizError with the mismatch otherwise)."""
    config = lm.model.config
    return EagleHead(lm, read_eagle(location, int(config.hidden_size),
                                    int(lm.model.get_output_embeddings().weight.shape[0]),
                                    int(config.num_hidden_layers)))


def drafts_from_features(draft) -> bool:
    """Whether a draft model is a head over the target's features (the trained head or an EAGLE head): the
    head's drafter (drafters.head) drafts with it."""
    from specviz.runtime.draft_head import DraftHead

    return isinstance(draft, (DraftHead, EagleHead))
