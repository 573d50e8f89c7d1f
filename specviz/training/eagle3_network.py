"""The EAGLE-3-shaped draft head as a trainable network (`train-head --shape eagle3`).

Its parameters carry SafeAILab/EAGLE's EAGLE-3 key names (fc, midlayer.*, norm, lm_head), so its state dict is the
file runtime.eagle_files reads and runtime.eagle_head drafts with. One head position, as runtime.eagle_head writes
it out:

    f = fc(fused)             fused: the hidden states entering the target's layers 2, N // 2 and N - 3 (3 x hidden);
                              at depth 2 and beyond the head's own previous output h, used as is
    h = f + attn([input_norm(embed(token)); hidden_norm(f)])
    h = h + mlp(post_norm(h));  logits = lm_head(norm(h)) over the draft vocabulary

The draft vocabulary's rows of lm_head start as the target's own head rows and stay frozen, as the trained head's do
(runtime.draft_head): the layer learns to land where the target's head reads the answer."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specviz.runtime.draft_head import HeadShape
from specviz.runtime.eagle_head import apply_rotary


class _RMSNorm(torch.nn.Module):
    def __init__(self, width: int, eps: float, init: torch.Tensor | None = None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(init.clone() if init is not None else torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


class _Attention(torch.nn.Module):
    def __init__(self, shape: HeadShape):
        super().__init__()
        q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        self.q_proj = torch.nn.Linear(2 * shape.hidden, q, bias=False)
        self.k_proj = torch.nn.Linear(2 * shape.hidden, kv, bias=False)
        self.v_proj = torch.nn.Linear(2 * shape.hidden, kv, bias=False)
        self.o_proj = torch.nn.Linear(q, shape.hidden, bias=False)


class _MLP(torch.nn.Module):
    def __init__(self, shape: HeadShape):
        super().__init__()
        self.gate_proj = torch.nn.Linear(shape.hidden, shape.intermediate, bias=False)
        self.up_proj = torch.nn.Linear(shape.hidden, shape.intermediate, bias=False)
        self.down_proj = torch.nn.Linear(shape.intermediate, shape.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Midlayer(torch.nn.Module):
    def __init__(self, shape: HeadShape, eps: float):
        super().__init__()
        self.self_attn = _Attention(shape)
        self.mlp = _MLP(shape)
        self.input_layernorm = _RMSNorm(shape.hidden, eps)
        self.hidden_norm = _RMSNorm(shape.hidden, eps)
        self.post_attention_layernorm = _RMSNorm(shape.hidden, eps)


class Eagle3Network(torch.nn.Module):
    """fc, midlayer, norm and a frozen lm_head (the target's head rows of the draft vocabulary draft_ids, sorted
    target ids). rotary: the target's LlamaRotaryEmbedding settings (a LlamaConfig)."""

    TRAINED = ("fc.", "midlayer.", "norm.")

    def __init__(self, shape: HeadShape, eps: float, rotary_config, head_rows: torch.Tensor, draft_ids: torch.Tensor,
                 norm_init: torch.Tensor | None = None):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        self.shape = shape
        self.fc = torch.nn.Linear(3 * shape.hidden, shape.hidden, bias=False)
        self.midlayer = _Midlayer(shape, eps)
        self.norm = _RMSNorm(shape.hidden, eps, norm_init)
        self.lm_head = torch.nn.Linear(shape.hidden, shape.draft_vocab, bias=False)
        self.lm_head.weight = torch.nn.Parameter(head_rows.float().contiguous(), requires_grad=False)
        self.rotary = LlamaRotaryEmbedding(rotary_config)
        self.register_buffer("draft_ids", draft_ids.clone().long(), persistent=False)

    def file_state(self) -> dict[str, torch.Tensor]:
        """The weights under EAGLE-3's key names, with d2t (draft id -> target id - draft id) and t2d."""
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()
                 if k.startswith(self.TRAINED + ("lm_head.",))}
        return state

    def step(self, embeds: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor,
             past: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """One training-time-test step over a batch: embeds (b, n, hidden) of the tokens, features (b, n, 3 hidden)
        fused from the target or (b, n, hidden) from the previous step, rotary positions (b, n), visible (n, keys)
        bool over the keys of the earlier steps in past and this step's own; appends this step's (keys, values) to
        past. Returns h (b, n, hidden), the head's output before its final norm (the next step's feature)."""
        s = self.shape
        b, n, _ = embeds.shape
        layer = self.midlayer
        f = self.fc(features) if features.shape[-1] == self.fc.in_features else features
        attention_in = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(f)], dim=-1)
        attn = layer.self_attn
        q = attn.q_proj(attention_in).view(b, n, s.heads, s.head_dim).transpose(1, 2)
        k = attn.k_proj(attention_in).view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
        v = attn.v_proj(attention_in).view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
        cos, sin = self.rotary(v, positions)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        past.append((k, v))
        keys = torch.cat([pk for pk, _ in past], dim=2)
        values = torch.cat([pv for _, pv in past], dim=2)
        groups = s.heads // s.kv_heads
        if groups > 1:
            keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible[None, None])
        h = f + attn.o_proj(attended.transpose(1, 2).reshape(b, n, s.heads * s.head_dim))
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def draft_logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(h))

