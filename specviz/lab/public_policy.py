"""Public mode: what a visitor of a public Space may ask for, and the refusals that say what is allowed.

On where SPACE_ID is set (a Hugging Face Space), with `app.py --public` or SPECVIZ_PUBLIC=1. Models come from an
allow-list (SPECVIZ_ALLOWED_MODELS, else SmolLM2 135M and 360M, and the 1.7B on ZeroGPU), never a local path; at
most MODEL_SLOTS stay loaded; new tokens, prompts, sweeps, uploads and live sessions have limits, each set from a
measured figure: two models and their sessions fit a free 16 GB CPU Space, and no visitor holds the model queue
for long. A refusal names what is allowed and nothing about the server.

Design notes: docs/design.md, "specviz/lab/public_policy.py"; figures: docs/benchmarks.md, "On a Space (issue
35)", Public mode's limits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from specviz.errors import SpecvizError, quoted
from specviz.lab.fair_share import ShareLimits
from specviz.lab.input_values import MAX_TOKENS_PRIVATE, whole_number
from specviz.runtime.loading import DEFAULT_MODEL
from specviz.runtime.draft_model_spec import SELF_DRAFT
from specviz.runtime.placement import on_space

DEFAULT_ALLOWED = (DEFAULT_MODEL, "HuggingFaceTB/SmolLM2-360M-Instruct")
# on ZeroGPU (SPACES_ZERO_GPU set) a larger target fits: every training-free method runs on it
GPU_ALLOWED = DEFAULT_ALLOWED + ("HuggingFaceTB/SmolLM2-1.7B-Instruct",)
# drafts a visitor may pick besides an allowed model: the default, the trained head (never `head:FILE`, a path),
# the target's own weights, or its first K layers
SELF_DRAFTS = ("", "head", "self", "self-skip:4", "self-skip:8", "self-skip:12")
MODEL_SLOTS = 2
MAX_NEW_TOKENS = 512
MAX_SWEEP_RUNS = 24
MAX_SWEEP_TOKENS = 64
MAX_UPLOAD_BYTES = 4 * 2**20
# the prompt: characters are checked before any model loads, tokens where the prompt is tokenized. Both cover
# the longest shipped example (long-context: lc-tidewater-4, 29,072 characters, 6,852 tokens)
MAX_PROMPT_CHARS = 32_000
MAX_PROMPT_TOKENS = 7_168
# live sessions (each Lab, and each A/B side) and the bytes their caches and drafters hold together (counted by
# their tensors' storage: engine.held_memory); the least recently used idle one is released when another would pass
# either (lab/live_sessions.py). Idle ones are trimmed first (no transposed keys, no spare room): then a unified
# session with its paired ar holds about 92 KB a context token, so 256 MiB is about 2,800 tokens at rest (twelve
# short sessions; a long prompt's session alone stays while it is the newest), which keeps what visitors leave behind
# within 300 MB of the process's start and a long prompt's running call within its 1 GB (the soak test;
# docs/hostile-round-three.md, "Sessions counted in bytes")
MAX_LIVE_SESSIONS = 12
MAX_LIVE_BYTES = 256 * 2**20
# requests waiting for the queue at once; one more is refused by Gradio ("queue is full") instead of piling up
MAX_QUEUE = 64
# a session's downloads (traces, tree SVGs, sweep CSVs) on disk, removed when it is released; every session's together
MAX_SESSION_FILES_BYTES = 64 * 2**20
MAX_FILES_BYTES = 1024 * 2**20
# uploads on disk (Gradio writes them before any event reads them): per address and every address together
MAX_UPLOADS_PER_ADDRESS_BYTES = 16 * 2**20
MAX_UPLOADS_BYTES = 256 * 2**20
# sessions Gradio keeps in memory (its StateHolder: the page's configuration and last outputs of each, about 0.4 MB
# after a first visit): 500 take about 200 MB of the process's budget (docs/hostile-round-three.md)
MAX_GRADIO_SESSIONS = 500
# method parameters a public visitor may not turn on: a datastore that grows with every finished answer is shared
# by every visitor, so one visitor's text would reach another's drafts
PRIVATE_ONLY_PARAMS = {"datastore_grow": 0}


def public_requested(flag: bool = False) -> bool:
    """Public mode: asked for (--public, SPECVIZ_PUBLIC=1) or on a Hugging Face Space (SPACE_ID set)."""
    return flag or on_space() or os.environ.get("SPECVIZ_PUBLIC", "") == "1"


def allowed_models() -> tuple[str, ...]:
    """The Space owner's list (SPECVIZ_ALLOWED_MODELS, comma-separated), else SmolLM2 135M and 360M Instruct, and
    the 1.7B on ZeroGPU."""
    names = [n.strip() for n in os.environ.get("SPECVIZ_ALLOWED_MODELS", "").split(",") if n.strip()]
    on_gpu = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")
    return tuple(dict.fromkeys(names)) or (GPU_ALLOWED if on_gpu else DEFAULT_ALLOWED)


def allowed_eagle_heads() -> tuple[str, ...]:
    """Published EAGLE heads a visitor may draft with (SPECVIZ_ALLOWED_EAGLE_HEADS, comma-separated hub ids or
    folders the Space ships, each as eagle:ID); none unless the Space's owner lists them (a path or hub id a
    visitor types would read or fetch anything)."""
    names = [n.strip() for n in os.environ.get("SPECVIZ_ALLOWED_EAGLE_HEADS", "").split(",") if n.strip()]
    return tuple(dict.fromkeys(n if n.startswith("eagle:") else f"eagle:{n}" for n in names))


def trained_eagle3_heads() -> tuple[str, ...]:
    """head-eagle3 where the default model has one trained here or shipped (runtime.trained_eagle3: the repository
    ships one in assets/trained, which a Space bundle copies), else nothing."""
    from specviz.runtime.draft_head import cached_head_path
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC, eagle3_folder_name, has_weights, shipped_eagle3_folder

    trained = has_weights(cached_head_path(eagle3_folder_name(DEFAULT_MODEL)))
    return (EAGLE3_SPEC,) if trained or shipped_eagle3_folder(DEFAULT_MODEL) is not None else ()


@dataclass(frozen=True)
class Policy:
    """What a visitor may ask for. Policy.private(): everything (the app as it runs on a laptop)."""
    public: bool = False
    models: tuple[str, ...] = ()
    max_new_tokens: int | None = None
    max_sweep_runs: int | None = None
    max_sweep_tokens: int | None = None
    max_upload_bytes: int | None = None
    model_slots: int | None = None
    drafts: tuple[str, ...] = field(default=())
    max_prompt_chars: int | None = None
    max_prompt_tokens: int | None = None
    max_live_sessions: int | None = None
    max_live_bytes: int | None = None
    max_queue: int | None = None
    max_session_files_bytes: int | None = None
    max_files_bytes: int | None = None
    max_uploads_per_address_bytes: int | None = None
    max_uploads_bytes: int | None = None
    max_gradio_sessions: int | None = None
    share: ShareLimits | None = None     # what one visitor may hold (lab.fair_share); None: no share

    @classmethod
    def private(cls) -> "Policy":
        return cls()

    @classmethod
    def for_public(cls) -> "Policy":
        models = allowed_models()
        return cls(public=True, models=models, max_new_tokens=MAX_NEW_TOKENS, max_sweep_runs=MAX_SWEEP_RUNS,
                   max_sweep_tokens=MAX_SWEEP_TOKENS, max_upload_bytes=MAX_UPLOAD_BYTES, model_slots=MODEL_SLOTS,
                   drafts=SELF_DRAFTS + trained_eagle3_heads() + models + allowed_eagle_heads(),
                   max_prompt_chars=MAX_PROMPT_CHARS,
                   max_prompt_tokens=MAX_PROMPT_TOKENS, max_live_sessions=MAX_LIVE_SESSIONS,
                   max_live_bytes=MAX_LIVE_BYTES, max_queue=MAX_QUEUE,
                   max_session_files_bytes=MAX_SESSION_FILES_BYTES, max_files_bytes=MAX_FILES_BYTES,
                   max_uploads_per_address_bytes=MAX_UPLOADS_PER_ADDRESS_BYTES, max_uploads_bytes=MAX_UPLOADS_BYTES,
                   max_gradio_sessions=MAX_GRADIO_SESSIONS, share=ShareLimits())

    @classmethod
    def from_environment(cls, public_flag: bool = False) -> "Policy":
        return cls.for_public() if public_requested(public_flag) else cls.private()

    @property
    def default_model(self) -> str:
        return self.models[0] if self.models else ""

    def check_model(self, name: str | None) -> str:
        """The model to load for a visitor's choice (blank: the first allowed); refused unless listed."""
        name = (name or "").strip()
        if not self.public:
            return name
        if not name:
            return self.default_model
        if name not in self.models:
            raise SpecvizError(f"This Space runs only the models on its list: {', '.join(self.models)}. "
                               "Pick one of them.")
        return name

    def check_draft(self, name: str | None) -> str:
        name = (name or "").strip()
        if not self.public or name in self.drafts or name == SELF_DRAFT:
            return name
        raise SpecvizError("This Space drafts only with its default (blank), the draft head trained for the target "
                           "(head), the target's own weights (self), its first K layers "
                           f"({', '.join(d for d in SELF_DRAFTS if d.startswith('self-skip'))}) or a model on its list "
                           f"({', '.join(self.models)})"
                           + "".join(f", or the EAGLE head {d}" for d in self.drafts if d.startswith("eagle:"))
                           + (", or the EAGLE-3 head (head-eagle3)" if "head-eagle3" in self.drafts
                              else "")
                           + ". Pick one of them.")

    def check_mode(self, mode: str | None) -> str:
        mode = (mode or "").strip()
        if self.public and "compile" in mode.lower():
            raise SpecvizError("This Space does not offer torch.compile modes: pick the device default, gguf or bf16.")
        return mode

    def check_new_tokens(self, n) -> int:
        """New tokens a run may produce: a whole number from 1 to the limit (no limit here: the context's)."""
        if self.max_new_tokens is not None:
            try:
                return whole_number("max_new_tokens", n, 1, self.max_new_tokens)
            except SpecvizError:
                raise SpecvizError(f"This Space generates 1 to {self.max_new_tokens} new tokens per run; asked for "
                                   f"{quoted(n)}.") from None
        return whole_number("max_new_tokens", n, 1, MAX_TOKENS_PRIVATE)

    def check_params(self, method: str, values: dict) -> dict:
        """A method's resolved parameters, refused where public mode keeps one off (PRIVATE_ONLY_PARAMS)."""
        if self.public:
            for name, allowed in PRIVATE_ONLY_PARAMS.items():
                if name in values and values[name] != allowed:
                    raise SpecvizError(f"This Space keeps {name} at {allowed}: what one visitor generates never "
                                       "joins another visitor's drafts. Run specviz on your own machine to grow "
                                       "the datastore.")
        return values

    def check_sweep(self, runs: int, tokens: int) -> None:
        if self.max_sweep_runs is not None and runs > self.max_sweep_runs:
            raise SpecvizError(f"This Space runs sweeps of at most {self.max_sweep_runs} runs (grid points x "
                               f"prompts); this one asks for {runs}. Give fewer values or use the page prompt.")
        if self.max_sweep_tokens is not None and int(tokens) > self.max_sweep_tokens:
            raise SpecvizError(f"This Space runs sweeps of at most {self.max_sweep_tokens} new tokens per run; "
                               f"asked for {int(tokens)}.")

    def link_settings(self, settings: dict, notes: list[str]) -> tuple[dict, list[str]]:
        """A share link's settings (lab.share_link) less what this policy keeps off or out of range, each named in
        a note: the same limits as a Step's."""
        if not self.public:
            return settings, notes
        kept = {k: v for k, v in settings.items() if k not in PRIVATE_ONLY_PARAMS}
        notes = [*notes, *(f"{k} stays at {PRIVATE_ONLY_PARAMS[k]} on this Space" for k in settings
                           if k in PRIVATE_ONLY_PARAMS)]
        if "max_new_tokens" in kept:
            try:
                kept["max_new_tokens"] = self.check_new_tokens(kept["max_new_tokens"])
            except SpecvizError:
                notes.append(f"max_new_tokens {quoted(kept.pop('max_new_tokens'))} is over this Space's "
                             f"{self.max_new_tokens}")
        return kept, notes

    def shown(self, text: str) -> str:
        """A message as this policy shows it: in public mode without any server path (lab/server_paths.py)."""
        from specviz.lab.server_paths import hide_server_paths

        return hide_server_paths(text) if self.public and isinstance(text, str) else text

    def check_upload(self, size: int) -> None:
        if self.max_upload_bytes is not None and size > self.max_upload_bytes:
            raise SpecvizError(f"This Space reads traces of at most {self.max_upload_bytes // 2**20} MB; this one "
                               f"is {size / 2**20:.1f} MB.")


def enforce(policy: Policy) -> None:
    """Put policy's process-wide limits in force: live sessions (in all and per visitor), the visitors' share of
    calls and memory, every session's downloads together, the uploads on disk. The app does this once at start-up."""
    from specviz.lab import visitors
    from specviz.lab.fair_share import SHARE
    from specviz.lab.live_sessions import LIVE
    from specviz.lab.upload_ledger import LEDGER

    LIVE.limit, LIVE.byte_limit = policy.max_live_sessions, policy.max_live_bytes
    share = policy.share
    LIVE.visitor_limit = share.live_sessions if share else None
    LIVE.visitor_byte_limit = share.live_bytes if share else None
    SHARE.configure(share)
    visitors.TOTAL_FILES_BYTES[0] = policy.max_files_bytes
    LEDGER.configure(policy.max_uploads_per_address_bytes, policy.max_uploads_bytes)
