"""Files a Space bundle ships beside app.py (`python -m specviz space-bundle`): what is slow to build at start-up
and small enough to travel, read before the cache and never written (a Space's disk does not persist):

    shipped/models/<the default model's GGUF>     the very weights every figure here was measured on (and the
                                                   head trained on), dequantised at start-up in seconds
    shipped/models/<the GGUF's name>.files/        the config and tokenizer files transformers makes of that GGUF
                                                   (runtime.loading: two fewer passes over its fields at start-up)
    shipped/heads/<model slug>.safetensors         the trained draft head of each allowed model
    shipped/copy_logits/<seed file>.npz            the default model's warm copy-logit table (drafters.copy_logit_seed)

SPECVIZ_SHIPPED names another folder (the tests' bundles)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS, HEADS, COPY_LOGITS = "models", "heads", "copy_logits"


def shipped_root() -> Path:
    folder = os.environ.get("SPECVIZ_SHIPPED", "").strip()
    return Path(folder) if folder else ROOT / "shipped"


def shipped_file(kind: str, name: str) -> Path | None:
    """The shipped file of a kind (MODELS, HEADS) and name, None where none is shipped."""
    path = shipped_root() / kind / name
    return path if path.is_file() else None


def shipped_folder(kind: str, name: str) -> Path | None:
    """The shipped folder of a kind and name, None where none is shipped."""
    path = shipped_root() / kind / name
    return path if path.is_dir() else None
