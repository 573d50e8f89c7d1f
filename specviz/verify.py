"""Verify a draft tree in one forward pass with tree attention, then decide which nodes the target accepts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specviz.tree import ROOT, DraftTree

ACCEPTED, REJECTED, UNREACHED, RELAXED, ROOT_STATUS = "accepted", "rejected", "unreached", "relaxed", "root"


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(q, kv) bool visibility (True = attend) as the additive 4D mask (1, 1, q, kv) every attention
    backend accepts: 0 / finfo.min in the model dtype (a 0/1 float mask would be silently wrong)."""
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask.view(1, 1, *visible.shape)


def tree_visibility(tree: DraftTree, past_len: int) -> torch.Tensor:
    """(q, past + q) bool: every node sees the whole cache and its own ancestors (tree attention)."""
    visible = torch.ones((len(tree), past_len + len(tree)), dtype=torch.bool)
    visible[:, past_len:] = torch.from_numpy(tree.ancestor_mask())
    return visible


@torch.inference_mode()
def masked_forward(model, cache, tokens: list[int], positions: list[int], visible: torch.Tensor) -> torch.Tensor:
    """Logits (q, vocab) of q tokens at the given positions, each attending to the cache entries and
    new tokens its row of visible (q, cache + q) allows; the cache grows by q entries."""
    device = model.device
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    position_ids = torch.tensor([positions], dtype=torch.long, device=device)
    out = model(input_ids=input_ids, position_ids=position_ids,
                attention_mask=additive_mask(visible.to(device), model.dtype),
                past_key_values=cache, use_cache=True)
    return out.logits[0].float()


def tree_forward(model, cache, tree: DraftTree, past_len: int) -> torch.Tensor:
    """Logits (q, vocab) for every tree node, root first; the cache grows by q entries."""
    return masked_forward(model, cache, tree.tokens, [past_len + d for d in tree.depths],
                          tree_visibility(tree, past_len))


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


def _verification(tree: DraftTree, logits: torch.Tensor, path: list[int], bonus: int,
                  compared: set[int], relaxed: set[int] = frozenset()) -> Verification:
    """Statuses: relaxed or accepted on the path; rejected if compared against the target and refused;
    else unreached."""
    on_path = set(path)
    statuses = [ROOT_STATUS] + [RELAXED if n in relaxed else ACCEPTED if n in on_path else
                                REJECTED if n in compared else UNREACHED for n in range(1, len(tree))]
    probs, ranks, log_norms = node_target_stats(tree, logits)
    return Verification(path=path, accepted_draft_tokens=[tree.tokens[n] for n in path], bonus_token=int(bonus),
                        statuses=statuses, target_probs=probs, target_ranks=ranks, log_norms=log_norms)


def greedy_accept(tree: DraftTree, logits: torch.Tensor) -> Verification:
    """Strict greedy verification: follow the child whose token is the target's argmax, as far as it goes."""
    argmax = logits.argmax(-1).tolist()
    path, node = [], ROOT
    compared: set[int] = set()
    while True:
        compared.update(tree.children(node))
        child = tree.child_with_token(node, argmax[node])
        if child is None:
            break
        path.append(child)
        node = child
    return _verification(tree, logits, path, argmax[node], compared)


def sampling_accept(tree: DraftTree, logits: torch.Tensor, temperature: float,
                    generator: torch.Generator) -> Verification:
    """Lossless speculative sampling for drafts that carry no draft distribution (deterministic
    proposals): at each accepted node, try its children in order; child c is accepted with the current
    residual probability p(c), and on refusal p loses c's mass and is renormalised. The bonus token is
    drawn from the residual left at the last accepted node. The output follows the target's sampling
    distribution exactly, whatever the drafts."""
    probs_all = torch.softmax(logits / temperature, dim=-1)
    path, node = [], ROOT
    compared: set[int] = set()
    while True:
        residual = probs_all[node].clone()
        accepted_child = None
        for child in tree.children(node):
            compared.add(child)
            token = tree.tokens[child]
            total = float(residual.sum())
            p_token = float(residual[token]) / total if total > 0 else 0.0
            if torch.rand((), generator=generator).item() < p_token:
                accepted_child = child
                break
            residual[token] = 0.0
        if accepted_child is None:
            bonus = int(torch.multinomial(residual / residual.sum(), 1, generator=generator).item())
            break
        path.append(accepted_child)
        node = accepted_child
    return _verification(tree, logits, path, bonus, compared)
