"""Files read before the cache and never written: what is slow to build at start-up and small enough to travel.

The repository itself ships the default model's trained draft head and warm copy-logit table (assets/trained/,
half precision, made by `python -m specviz trained-files`; its CARD.md says how), so a fresh clone drafts with the
head from its first step. A Space bundle (`python -m specviz space-bundle`) ships more beside app.py, read first:

    shipped/models/<the default model's GGUF>     the very weights every figure here was measured on (and the
                                                   head trained on), dequantised at start-up in seconds
    shipped/models/<the GGUF's name>.files/        the config and tokenizer files transformers makes of that GGUF
                                                   (runtime.loading: two fewer passes over its fields at start-up)
    shipped/heads/<model slug>.safetensors         the trained draft head of each allowed model
    shipped/copy_logits/<seed file>.npz            the default model's warm copy-logit table (drafters.copy_logit_seed)

assets/trained/heads/<model slug>.eagle3/ is the default model's EAGLE-3 head (`--draft-model head-eagle3`,
runtime.trained_eagle3), float16 and without its lm_head rows (the target's own).

SPECVIZ_SHIPPED names another folder for the bundle's files (the tests' bundles)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS, HEADS, COPY_LOGITS = "models", "heads", "copy_logits"
TRAINED = ROOT / "assets" / "trained"   # the repository's own: heads/ and copy_logits/ of the default model


def shipped_root() -> Path:
    folder = os.environ.get("SPECVIZ_SHIPPED", "").strip()
    return Path(folder) if folder else ROOT / "shipped"


def shipped_file(kind: str, name: str) -> Path | None:
    """The shipped file of a kind (MODELS, HEADS, COPY_LOGITS) and name: a bundle's, else the repository's
    (TRAINED); None where neither ships one."""
    for root in (shipped_root(), TRAINED):
        path = root / kind / name
        if path.is_file():
            return path
    return None


def shipped_folder(kind: str, name: str) -> Path | None:
    """The shipped folder of a kind and name: a bundle's, else the repository's (TRAINED); None where none is
    shipped."""
    for root in (shipped_root(), TRAINED):
        path = root / kind / name
        if path.is_dir():
            return path
    return None
