"""A draft head for a target model: one decoder layer that drafts from the target's own features (EAGLE).

The head predicts the target's next final-norm feature from the last one and the token after it, and drafts over the
target's own head cut to its most frequent tokens (FR-Spec), so a draft level costs one small layer and a few MB of
head rows instead of a target forward. It runs on the target's lean decoder and kernels. `load_head` reads the
safetensors file and refuses, with a sentence for the user, one that is corrupt, of a newer format, or trained for
another target or vocabulary.

Design notes: docs/design.md, "specviz/runtime/draft_head.py"; the file: docs/runtime.md, "The draft head's file".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from specviz.runtime.cache_files import write_atomically
from specviz.errors import SpecvizError
from specviz.runtime.feature_tap import FINAL
from specviz.runtime.cache_dir import cache_root
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.shipped import HEADS, shipped_file

FORMAT = "specviz-draft-head"
FORMAT_VERSION = 1
HEAD_SPEC = "head"  # the draft model spec that names the trained head
TRAIN_HINT = "train it with `python -m specviz train-head`"
PROBE_VALUES = 64      # weights of the target the file keeps to recognise it
PROBE_TOLERANCE = 2e-2  # relative: a bf16 or fp16 copy of the same weights still matches


# ---- what the file records --------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadShape:
    """The head's layer: the target's attention geometry, an MLP width of its own, a draft vocabulary."""
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    draft_vocab: int


@dataclass(frozen=True)
class TargetIdentity:
    """What a head was trained for: the target's name, its shape, a probe of its weights, its vocabulary."""
    name: str
    hidden: int
    layers: int
    vocab: int
    vocab_sha256: str
    probe: tuple[float, ...]


@dataclass(frozen=True)
class HeadRecord:
    """The file's header: format, version, target, shape, and how the head was trained (free-form)."""
    target: TargetIdentity
    shape: HeadShape
    training: dict = field(default_factory=dict)
    format: str = FORMAT
    version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "HeadRecord":
        data = json.loads(text)
        return cls(target=TargetIdentity(**{**data["target"], "probe": tuple(data["target"]["probe"])}),
                   shape=HeadShape(**data["shape"]), training=dict(data.get("training", {})),
                   format=data["format"], version=int(data["version"]))


@dataclass(frozen=True)
class MissingHead:
    """What stands in for a head that cannot draft: why, in a sentence for the user. A method given one
    drafts with the copy-logit tree where the head would have drafted, and shows the reason."""
    reason: str
    name: str = "head (unavailable)"


# ---- the target's identity ----------------------------------------------------------------------------
_vocab_digests: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def vocab_digest(tokenizer) -> str:
    """sha256 of the tokenizer's token -> id map (computed once per tokenizer)."""
    digest = _vocab_digests.get(tokenizer)
    if digest is None:
        text = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
        digest = _vocab_digests.setdefault(tokenizer, hashlib.sha256(text.encode()).hexdigest())
    return digest


def weight_probe(lm: LoadedModel) -> tuple[float, ...]:
    """PROBE_VALUES weights of the target's output embedding, spread over its rows and columns."""
    weight = lm.model.get_output_embeddings().weight.detach()
    rows, columns = weight.shape
    index = torch.arange(PROBE_VALUES)
    picked = weight[(index * 7919) % rows, (index * 104729) % columns]
    return tuple(round(float(v), 7) for v in picked.float().cpu())


def target_identity(lm: LoadedModel) -> TargetIdentity:
    config = lm.model.config
    return TargetIdentity(name=lm.name, hidden=int(config.hidden_size), layers=int(config.num_hidden_layers),
                          vocab=lm.vocab_size, vocab_sha256=vocab_digest(lm.tokenizer), probe=weight_probe(lm))


def target_shape(lm: LoadedModel, intermediate: int, draft_vocab: int) -> HeadShape:
    config = lm.model.config
    heads = int(config.num_attention_heads)
    return HeadShape(hidden=int(config.hidden_size), heads=heads,
                     kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
                     head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
                     intermediate=int(intermediate), draft_vocab=int(draft_vocab))


def why_not_for(record: HeadRecord, lm: LoadedModel) -> str | None:
    """None when a head with this record drafts for lm, else why not (a sentence)."""
    mine, theirs = record.target, target_identity(lm)
    if mine.vocab != theirs.vocab or mine.vocab_sha256 != theirs.vocab_sha256:
        return (f"it was trained for another vocabulary ({mine.vocab} tokens, digest {mine.vocab_sha256[:12]}) "
                f"than {lm.name}'s ({theirs.vocab} tokens, digest {theirs.vocab_sha256[:12]})")
    probe_close = len(mine.probe) == len(theirs.probe) and all(
        abs(a - b) <= PROBE_TOLERANCE * max(abs(a), abs(b), 1e-3) for a, b in zip(mine.probe, theirs.probe))
    if (mine.hidden, mine.layers) != (theirs.hidden, theirs.layers) or not probe_close:
        return f"it was trained for another model ({mine.name}), not {lm.name}"
    if target_shape(lm, record.shape.intermediate, record.shape.draft_vocab) != record.shape:
        return f"its layer's shape does not fit {lm.name}"
    return None


# ---- the network --------------------------------------------------------------------------------------
def head_config(lm: LoadedModel, shape: HeadShape):
    """A one-layer Llama config with the target's attention geometry, rotary and norm epsilon."""
    from transformers import LlamaConfig

    source = lm.model.config
    if getattr(source, "rope_parameters", None) is not None:  # transformers 5 keeps theta and scaling in here
        rope = {"rope_parameters": dict(source.rope_parameters)}
    else:
        rope = {name: getattr(source, name) for name in ("rope_scaling", "rope_theta")
                if getattr(source, name, None) is not None}
    return LlamaConfig(vocab_size=shape.draft_vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                       num_hidden_layers=1, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                       head_dim=shape.head_dim, max_position_embeddings=lm.max_context,
                       rms_norm_eps=float(getattr(source, "rms_norm_eps", 1e-6)), tie_word_embeddings=True,
                       attn_implementation="sdpa", **rope)


class HeadNetwork(torch.nn.Module):
    """fc and `body`, a one-layer Llama whose head is the target's head cut to the draft vocabulary (its
    embedding is tied to that cut head and unused: the body's input is fc's output). Trainable: fc, the
    layer and the final norm; the cut head is the target's and stays frozen."""

    TRAINED = ("fc.", "body.model.layers.0.", "body.model.norm.")

    def __init__(self, lm: LoadedModel, shape: HeadShape, draft_ids: torch.Tensor):
        super().__init__()
        from transformers import LlamaForCausalLM

        self.shape = shape
        self.fc = torch.nn.Linear(2 * shape.hidden, shape.hidden, bias=False)
        self.body = LlamaForCausalLM(head_config(lm, shape))
        rows = lm.model.get_output_embeddings().weight.detach().float().cpu().index_select(0, draft_ids.cpu())
        self.body.lm_head.weight = torch.nn.Parameter(rows.contiguous(), requires_grad=False)
        self.body.model.embed_tokens.weight = self.body.lm_head.weight
        self.register_buffer("draft_ids", draft_ids.clone().long(), persistent=False)

    def trained_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous() for k, v in self.state_dict().items() if k.startswith(self.TRAINED)}

    def train_forward(self, embeds: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                      mask: torch.Tensor, cache=None) -> torch.Tensor:
        """Predicted features (batch, n, hidden) for inputs embed(token_t) and f_{t-1} (batch, n, hidden) at
        position_ids (batch, n), attention by the mask (batch or 1, 1, n, past + n; bool, True = attend) over the
        entries of cache (a transformers DynamicCache that keeps its autograd graph; None: none) and these."""
        inner = self.body.model
        x = self.fc(torch.cat([embeds, features], dim=-1))
        rotary = inner.rotary_emb(x, position_ids=position_ids)
        x = inner.layers[0](x, attention_mask=mask, position_embeddings=rotary, position_ids=position_ids,
                            past_key_values=cache, use_cache=cache is not None)
        if isinstance(x, tuple):
            x = x[0]
        return inner.norm(x)

    def draft_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary for features (..., hidden)."""
        return self.body.lm_head(features)


# ---- the runtime object --------------------------------------------------------------------------------
class DraftHead:
    """A trained head bound to its target: read-only, shared by every session (runtime.shared_resources). forward()
    runs one block of head positions; the drafter (drafters.head) keeps the KV cache and the tree."""

    def __init__(self, lm: LoadedModel, network: HeadNetwork, record: HeadRecord, path: Path | None = None):
        from specviz.runtime import fast_linear, lean_forward

        self.lm, self.record, self.path = lm, record, path
        self.network = network.to(lm.device).eval()
        for parameter in self.network.parameters():
            parameter.requires_grad_(False)
        self.draft_ids = network.draft_ids.to(lm.device)
        self.draft_ids_list: list[int] = self.draft_ids.tolist()
        self.draft_ids_cpu = network.draft_ids.cpu()
        self.draft_index = {token: i for i, token in enumerate(self.draft_ids_list)}  # token id -> row
        self.embed = lm.model.get_input_embeddings()
        self.dtype = lm.dtype
        self.network.to(lm.dtype)
        packed = lm.packed
        kernel = lm.float_linear  # its own weights are floats (in the gguf mode too)
        self.linear = fast_linear.kernel(kernel)
        prepare = fast_linear.weight_preparer(kernel, packed)
        self.fc = prepare(self.network.fc.weight, self.network.fc)
        self.decoder, why = lean_forward.build(self.network.body, self.linear, prepare)
        if self.decoder is None:
            raise SpecvizError(f"The draft head cannot run here: {why}.")
        self._runners: dict = {}  # captured or not -> runtime.captured_head.CapturedHead (static_runner)
        self._warm_up()

    def _warm_up(self) -> None:
        """One forward of one node and one of a few: the first forward pays for setting up the kernels
        (2.5 s on the 2-core CPU), which would otherwise land in a session's first measured step and make
        unified's model stage look 100x slower than it is."""
        for n in (1, 4):
            visible = torch.ones((n, n), dtype=torch.bool).tril()
            self.forward(torch.zeros(n, self.network.shape.hidden), [0] * n, list(range(n)), visible, self.new_cache())

    name = HEAD_SPEC
    feature_tap = FINAL  # it reads the target's final-norm features

    @property
    def config(self):
        return self.network.body.config

    @property
    def feature_width(self) -> int:
        return self.network.shape.hidden

    @property
    def size(self) -> int:
        """Weights a draft level reads: fc, the layer and the cut head."""
        body = self.network.body
        layer = sum(p.numel() for p in body.model.layers[0].parameters())
        return self.network.fc.weight.numel() + layer + body.lm_head.weight.numel()

    def new_cache(self):
        """A static cache while the target's verify forward is static (its levels captured as the target's forwards
        are: runtime.captured_head), else a dynamic one."""
        from specviz.runtime.kv import new_cache

        runner = self.static_runner()
        return runner.new_cache() if runner is not None else new_cache(self.config)

    def static_runner(self, cache=None):
        """The runner of the head's captured levels that matches the target's verifier (captured on CUDA, or the
        CPU's uncaptured stand-in); None while the target runs eager. With a static cache: the one it belongs to
        (one is made for a cache restored from another process)."""
        from specviz.runtime.captured_head import CapturedHead

        if cache is not None and cache.owner is not None:
            return cache.owner
        verifier = self.lm.verifier
        if verifier is None and cache is None:
            return None
        capture, pad = (verifier.capture, verifier.pad) if verifier is not None else (False, False)
        if capture not in self._runners:
            self._runners[capture] = CapturedHead(self, capture, pad)
        return self._runners[capture]

    @torch.inference_mode()
    def forward(self, features: torch.Tensor, tokens: list[int], positions: list[int], visible: torch.Tensor,
                cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Head positions for tokens (n) after features (n, hidden): node i reads embed(tokens[i]) and the
        feature of the position before it, sits at positions[i] and attends to the cache entries and block
        rows its row of visible (n, cache + n) allows; the cache grows by n. Returns the logits over the
        draft vocabulary (n, draft_vocab) in fp32 and the predicted features (n, hidden) in fp32."""
        from specviz.runtime.masks import additive_mask
        from specviz.runtime.static_kv import StaticKV

        if isinstance(cache, StaticKV):
            return self.static_runner(cache).forward(cache, features, tokens, positions, visible)
        device = self.lm.device
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        x = torch.cat([self.embed(ids), features.to(device, self.dtype)[None]], dim=-1)
        x = self.linear(x, self.fc, None)
        position_ids = torch.tensor([positions], dtype=torch.long, device=device)
        mask = additive_mask(visible.to(device), self.dtype)[0, 0]
        return self.decoder.run_embedded(x.contiguous(), position_ids, mask, cache, features=True)


# ---- files --------------------------------------------------------------------------------------------
def file_slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[-80:]


def head_file_name(model_name: str) -> str:
    """The file name of a target's head, from the loaded model's name (LoadedModel.name)."""
    return f"{file_slug(model_name)}.safetensors"


def cached_head_path(file_name: str) -> Path:
    """Where a head is trained to and cached: SPECVIZ_HEADS when set (the tests point it at an empty folder),
    else the cache's heads/."""
    folder = os.environ.get("SPECVIZ_HEADS", "").strip()
    return (Path(folder) if folder else cache_root() / "heads") / file_name


def head_path(lm: LoadedModel) -> Path:
    """Where the head for this target is (one per model, like the datastore per tokenizer): in SPECVIZ_HEADS when
    set, else a Space bundle's shipped head (runtime.shipped) where there is one, else in the cache."""
    name = head_file_name(lm.name)
    if os.environ.get("SPECVIZ_HEADS", "").strip():
        return cached_head_path(name)
    return shipped_file(HEADS, name) or cached_head_path(name)


def save_head(network: HeadNetwork, record: HeadRecord, path: Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write the trained weights (in dtype: float16 for the copy the repository ships) and the draft vocabulary
    with the record, atomically. A head is always loaded into fp32 parameters."""
    from safetensors.torch import save_file

    tensors = {**{k: v.to(dtype).cpu() for k, v in network.trained_state().items()},
               "draft_ids": network.draft_ids.cpu().long().contiguous()}
    return write_atomically(path, lambda staging: save_file(tensors, str(staging),
                                                            metadata={"specviz": record.to_json()}))


def read_record(path: Path) -> HeadRecord:
    """The header of a head file (SpecvizError when it is not one)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            text = (f.metadata() or {}).get("specviz")
        if text is None:
            raise ValueError("no specviz header")
        record = HeadRecord.from_json(text)
    except Exception as exc:  # safetensors, json and dataclass errors alike: the file is not a head
        raise SpecvizError(f"The draft head file '{path}' is corrupt or not a draft head ({type(exc).__name__}): "
                           f"{TRAIN_HINT}.") from None
    if record.format != FORMAT:
        raise SpecvizError(f"'{path}' is not a draft head file (format {record.format!r}): {TRAIN_HINT}.")
    if record.version > FORMAT_VERSION:
        raise SpecvizError(f"The draft head '{path}' has format version {record.version}, newer than this specviz "
                           f"reads ({FORMAT_VERSION}): update specviz, or {TRAIN_HINT}.")
    if record.version < FORMAT_VERSION:
        raise SpecvizError(f"The draft head '{path}' has an old format (version {record.version}): {TRAIN_HINT}.")
    return record


def load_head(lm: LoadedModel, path: Path | None = None) -> DraftHead:
    """The head in path (default: this target's cache file), checked against lm; SpecvizError otherwise."""
    from safetensors.torch import load_file

    path = Path(path) if path is not None else head_path(lm)
    if not path.is_file():
        raise SpecvizError(f"No draft head for {lm.name} yet: {TRAIN_HINT}.")
    record = read_record(path)
    why = why_not_for(record, lm)
    if why is not None:
        raise SpecvizError(f"The draft head '{path}' cannot draft here: {why}; {TRAIN_HINT}.")
    corrupt = SpecvizError(f"The draft head file '{path}' is corrupt: {TRAIN_HINT}.")
    try:
        tensors = load_file(str(path))
    except Exception:
        raise corrupt from None
    draft_ids = tensors.pop("draft_ids", None)
    if draft_ids is None or draft_ids.dim() != 1 or len(draft_ids) != record.shape.draft_vocab \
            or len(draft_ids) == 0 or int(draft_ids.min()) < 0 or int(draft_ids.max()) >= lm.vocab_size \
            or len(set(draft_ids.tolist())) != len(draft_ids):
        raise corrupt
    network = HeadNetwork(lm, record.shape, draft_ids)
    expected = network.trained_state()
    if set(tensors) != set(expected) or any(tensors[k].shape != expected[k].shape for k in expected) \
            or not all(torch.isfinite(t).all() for t in tensors.values()):
        raise corrupt
    network.load_state_dict(tensors, strict=False)
    return DraftHead(lm, network, record, path)


def head_exists(lm: LoadedModel) -> bool:
    return head_path(lm).is_file()
