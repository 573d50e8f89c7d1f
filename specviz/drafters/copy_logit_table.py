"""The copy-logit table behind RACER's logits tree: per token id, the target's top-k next tokens and their
probabilities where that token last occurred; a table's own rows over shared read-only ones (the warm seed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specviz.accept.verification import top_logits


@dataclass(frozen=True)
class FrozenRows:
    """Dense read-only rows shared by many tables (the warm seed): (vocab, width) tokens and probabilities."""
    top_tokens: np.ndarray
    top_probs: np.ndarray
    seen: np.ndarray        # (vocab,) whether the row holds anything


class CopyLogitTable:
    """Per token: the target's top-`width` next tokens and their probabilities where it last occurred.
    The rows a table writes are its own (a dict: a table costs the rows it writes, not vocab x width);
    a row it has not written comes from `base`, shared read-only rows (the warm seed), so the copy each
    session starts from is free."""

    def __init__(self, width: int, base: FrozenRows | None = None):
        self.width = width
        self.base = base
        self.rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.vocab: int | None = base.seen.shape[0] if base is not None else None

    def store(self, tokens: list[int], logits: torch.Tensor, log_norms: np.ndarray | None = None,
              top: tuple[np.ndarray, np.ndarray] | None = None, logit_rows: list[int] | None = None) -> None:
        """logits[logit_rows[i]] (default: logits[i]) is the target's prediction after tokens[i]; a token
        listed twice keeps its last row. log_norms and top ((values, ids) of each row's top-k, k >= width)
        are per logits row, as numpy arrays, where the caller has them already."""
        self.vocab = logits.shape[-1]
        last = {int(token): i for i, token in enumerate(tokens)}  # a token listed twice keeps its last row
        picked = list(last.values()) if logit_rows is None else [logit_rows[i] for i in last.values()]
        if top is not None and log_norms is not None and top[0].shape[-1] >= self.width:
            # a verified step's rows: a few small arrays (numpy indexing costs a tenth of torch's per call)
            top_tokens = top[1][picked, :self.width]
            top_probs = np.exp(top[0][picked, :self.width] - log_norms[picked, None])
        else:
            picked_logits = logits.index_select(0, torch.tensor(picked, dtype=torch.long, device=logits.device))
            values, indices, norms = top_logits(picked_logits, min(self.width, logits.shape[-1]))
            top_tokens = indices.cpu().numpy()
            top_probs = (values - norms[:, None]).exp().cpu().numpy()
        for i, token in enumerate(last):
            self.rows[token] = (top_tokens[i], top_probs[i])

    def copy(self) -> "CopyLogitTable":
        """A table that starts from this one's rows and writes its own (this one is never changed by it)."""
        twin = CopyLogitTable(self.width, self.frozen())
        return twin

    def frozen(self) -> FrozenRows | None:
        """All rows as dense shared arrays (computed once for a table that wrote rows over no base)."""
        if not self.rows:
            return self.base
        vocab = self.vocab
        top_tokens = np.zeros((vocab, self.width), dtype=np.int32)
        top_probs = np.zeros((vocab, self.width), dtype=np.float32)
        seen = np.zeros(vocab, dtype=bool)
        if self.base is not None:
            top_tokens[:], top_probs[:], seen[:] = self.base.top_tokens, self.base.top_probs, self.base.seen
        for token, (tokens, probs) in self.rows.items():
            top_tokens[token], top_probs[token], seen[token] = tokens, probs, True
        self.base, self.rows = FrozenRows(top_tokens, top_probs, seen), {}
        return self.base

    def shared_parts(self) -> dict:
        """A table shared as a warm seed: the frozen rows every copy of it reads."""
        return {"rows": self.frozen()}

    @property
    def filled(self) -> int:
        """How many tokens have a row (own or shared)."""
        shared = int(self.base.seen.sum()) if self.base is not None else 0
        own_new = sum(1 for t in self.rows if self.base is None or t >= len(self.base.seen) or not self.base.seen[t])
        return shared + own_new

    def saved_rows(self, tokens: list[int]) -> dict:
        """The own rows store(tokens, ...) would overwrite (None: the table had none of its own there)."""
        return {t: self.rows.get(t) for t in set(tokens)}

    def restore_rows(self, saved: dict) -> None:
        for token, row in saved.items():
            if row is None:
                self.rows.pop(token, None)
            else:
                self.rows[token] = row

    def row(self, token: int) -> tuple[np.ndarray, np.ndarray] | None:
        own = self.rows.get(token)
        if own is not None:
            return own
        base = self.base
        if base is None or token >= len(base.seen) or not base.seen[token]:
            return None  # cold row: draft nothing after this token
        return base.top_tokens[token], base.top_probs[token]
