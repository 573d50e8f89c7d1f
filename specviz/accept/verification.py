"""What a verification decided: the accepted path, the bonus token, and every node's status and target
statistics. The acceptance rules (greedy, sampling, relaxed) each build one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specviz.core.tree import DraftTree

ACCEPTED, REJECTED, UNREACHED, RELAXED, ROOT_STATUS = "accepted", "rejected", "unreached", "relaxed", "root"


@dataclass
class Verification:
    path: list[int]                  # accepted draft nodes, root's child first
    accepted_draft_tokens: list[int]  # their tokens
    bonus_token: int                 # the target's own token after the last accepted node
    statuses: list[str]              # per node, root included
    target_probs: np.ndarray         # p_target(node token | its parent's context), per node (root: nan)
    target_ranks: np.ndarray         # rank of the node token in that distribution (0 = argmax; root: -1)
    log_norms: torch.Tensor | None = None  # logsumexp of every node's logits (q,), for log-probabilities

    @property
    def accepted_tokens(self) -> list[int]:
        """Tokens this step commits: the accepted drafts, then the bonus."""
        return self.accepted_draft_tokens + [self.bonus_token]


def node_target_stats(tree: DraftTree, logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """Target probability and rank of every draft node's token under its parent's logits, and the
    logsumexp of every node's logits."""
    n = len(tree)
    probs = np.full(n, np.nan)
    ranks = np.full(n, -1, dtype=np.int64)
    log_norms = torch.logsumexp(logits, dim=-1)
    if n > 1:
        parents = torch.tensor(tree.parents[1:], device=logits.device)
        tokens = torch.tensor(tree.tokens[1:], device=logits.device)
        rows = logits.index_select(0, parents)
        token_logits = rows.gather(1, tokens[:, None])
        log_probs = token_logits[:, 0] - log_norms.index_select(0, parents)
        probs[1:] = log_probs.exp().cpu().numpy()
        ranks[1:] = (rows > token_logits).sum(-1).cpu().numpy()
    return probs, ranks, log_norms


def make_verification(tree: DraftTree, logits: torch.Tensor, path: list[int], bonus: int,
                  compared: set[int], relaxed: set[int] = frozenset()) -> Verification:
    """Statuses: relaxed or accepted on the path; rejected if compared against the target and refused;
    else unreached."""
    on_path = set(path)
    statuses = [ROOT_STATUS] + [RELAXED if n in relaxed else ACCEPTED if n in on_path else
                                REJECTED if n in compared else UNREACHED for n in range(1, len(tree))]
    probs, ranks, log_norms = node_target_stats(tree, logits)
    return Verification(path=path, accepted_draft_tokens=[tree.tokens[n] for n in path], bonus_token=int(bonus),
                        statuses=statuses, target_probs=probs, target_ranks=ranks, log_norms=log_norms)
