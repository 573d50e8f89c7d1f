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

    def __init__(self, lm: LoadedModel, files: EagleFiles, name: str | None = None):
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        from specviz.runtime import fast_linear

        # not the files themselves: their weights dict would keep a host copy of every weight for good
        self.lm, self.layout = lm, files.layout
        self.name = name or f"{EAGLE_SPEC}:{files.source}"
        self.feature_tap = files.tap
        g = files.geometry
        self.geometry = g
        device, dtype = lm.device, lm.dtype
        prefix = "midlayer." if files.layout is EagleLayout.EAGLE3 else "layers.0."
        take = lambda key: files.weights[key].to(device, dtype).contiguous()  # noqa: E731
        self.w = {part: take(f"{prefix}{part}.weight") for part in
                  ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "post_attention_layernorm")}
        fc = take("fc.weight")
        self.fc_inputs = fc.shape[1]   # 3 x the target's width for EAGLE-3's fused features
        self.fc_bias = take("fc.bias") if "fc.bias" in files.weights else None
        # the linears run on the target's kernel (the native one on a CPU in fp32: a draft level costs a fifth of
        # what F.linear's takes for a few rows), q/k/v and gate/up each as one matrix
        kernel = lm.float_linear  # its own weights are floats (in the gguf mode too)
        self.linear, prepare = fast_linear.kernel(kernel), fast_linear.weight_preparer(kernel, lm.packed)
        linear_of = self.linear
        w = self.w
        self.qkv = prepare(torch.cat([w["self_attn.q_proj"], w["self_attn.k_proj"], w["self_attn.v_proj"]]))
        self.gate_up = prepare(torch.cat([w["mlp.gate_proj"], w["mlp.up_proj"]]))
        self.o_proj, self.down = prepare(w["self_attn.o_proj"]), prepare(w["mlp.down_proj"])
        self.fc_prepared = prepare(fc)
        if files.layout is EagleLayout.EAGLE3:
            self.input_norm, self.hidden_norm = take("midlayer.input_layernorm.weight"), take("midlayer.hidden_norm.weight")
            self.norm, head = take("norm.weight"), take("lm_head.weight")
            self.head_linear, self.head_prepared = linear_of, prepare(head)
        else:  # EAGLE-1/2: the target's own head (its whole vocabulary) reads the layer's output, used as it is
            self.norm, head = None, lm.model.get_output_embeddings().weight.detach()
            self.head_linear, self.head_prepared = F.linear, head
        self._size = fc.numel() + sum(w.numel() for w in self.w.values()) + head.numel()
        # only the prepared weights stay (the native kernel's and packed oneDNN's are copies of the dense ones)
        self.w = {"post_attention_layernorm": self.w["post_attention_layernorm"]}
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
        return self._size

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
        linear = self.linear
        if self.layout is EagleLayout.EAGLE1:
            x = linear(torch.cat([embedded, f], dim=-1), self.fc_prepared, self.fc_bias)
            residual, attention_in = x, x
        else:
            if f.shape[-1] == self.fc_inputs:  # the target's fused layers; the head's own features are hidden wide
                f = linear(f, self.fc_prepared, None)
            residual = f
            attention_in = torch.cat([self._rmsnorm(embedded, self.input_norm), self._rmsnorm(f, self.hidden_norm)], -1)
        q_width, kv_width = g.heads * g.head_dim, g.kv_heads * g.head_dim
        q, k, v = linear(attention_in, self.qkv, None).split([q_width, kv_width, kv_width], dim=-1)
        q = q.reshape(1, n, g.heads, g.head_dim).transpose(1, 2)
        k = k.reshape(1, n, g.kv_heads, g.head_dim).transpose(1, 2)
        v = v.reshape(1, n, g.kv_heads, g.head_dim).transpose(1, 2)
        position_ids = torch.tensor([[max(0, p - 1) for p in positions]], dtype=torch.long, device=device)
        cos, sin = self.rotary(v, position_ids)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        keys, values = cache.layers[0].update(k, v)
        groups = g.heads // g.kv_heads
        if groups > 1:
            keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible.to(device)[None, None])
        h = residual + linear(attended.transpose(1, 2).reshape(n, q_width), self.o_proj, None)
        gate, up = linear(self._rmsnorm(h, self.w["post_attention_layernorm"]), self.gate_up, None).chunk(2, dim=-1)
        h = h + linear(F.silu(gate) * up, self.down, None)
        read = h if self.norm is None else self._rmsnorm(h, self.norm)
        return self.head_linear(read, self.head_prepared, None).float(), h.float()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (Llama's rotate-half convention); x (b, heads, n, head_dim), cos/sin (b, n, head_dim)."""
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def load_eagle(lm: LoadedModel, location: str, name: str | None = None) -> EagleHead:
    """The EAGLE head at location checked against lm (SpecvizError with the mismatch otherwise); name: the
    drafter's label (default eagle:LOCATION)."""
    config = lm.model.config
    output = lm.model.get_output_embeddings().weight
    return EagleHead(lm, read_eagle(location, int(config.hidden_size), int(output.shape[0]),
                                    int(config.num_hidden_layers), output), name)


def drafts_from_features(draft) -> bool:
    """Whether a draft model is a head over the target's features (the trained head or an EAGLE head): the
    head's drafter (drafters.head) drafts with it."""
    from specviz.runtime.draft_head import DraftHead

    return isinstance(draft, (DraftHead, EagleHead))
