"""What a verification decided: the accepted path, the bonus token, and every node's status and target
statistics. The acceptance rules (greedy, sampling, relaxed) each build one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specviz.records.charts import PositionChart
from specviz.records.status import NodeStatus
from specviz.runtime.native import logit_kernel
from specviz.runtime.verify_output import DeviceSummary
from specviz.tree.draft_tree import DraftTree

# module names for the statuses written per node (an enum attribute lookup costs ~0.2 us)
_ROOT, _ACCEPTED, _RELAXED, _TRANSFERRED, _REJECTED, _UNREACHED = (
    NodeStatus.ROOT, NodeStatus.ACCEPTED, NodeStatus.RELAXED, NodeStatus.TRANSFERRED, NodeStatus.REJECTED,
    NodeStatus.UNREACHED)


@dataclass
class Verification:
    path: list[int]                  # accepted draft nodes, root's child first
    accepted_draft_tokens: list[int]  # their tokens
    bonus_token: int                 # the target's own token after the last accepted node
    statuses: list[NodeStatus]       # per node, root included
    target_probs: np.ndarray         # p_target(node token | its parent's context), per node (root: nan)
    target_ranks: np.ndarray         # rank of the node token in that distribution (0 = argmax; root: -1)
    log_norms: np.ndarray | None = None  # logsumexp of every node's logits (q,), for log-probabilities
    top: "LogitTop | None" = None     # every node's top-TOP_K logits (make_verification always sets it)
    charts: dict[int, PositionChart] | None = None  # sampling: per visited node, the top tokens of p (q, p_hat, output)
    empty_residuals: int = 0          # sampling: bonus draws whose residual was empty (drawn from p instead)

    @property
    def accepted_tokens(self) -> list[int]:
        """Tokens this step commits: the accepted drafts, then the bonus."""
        return self.accepted_draft_tokens + [self.bonus_token]


TOP_K = 16  # the widest row any consumer reads (copy-logit max_breadth <= 16, top-2 margins, argmax)


TOP_BLOCK = 128  # vocabulary block of blockwise_topk


def blockwise_topk(logits: torch.Tensor, k: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(logits, k) in two cheap passes (a CPU's topk over 65 x 49,152 logits took 1.6 ms, this
    0.55): the k largest values of a row lie in the k blocks with the largest maxima (a block holding one
    of them has a maximum at least that large, and only k - 1 values beat it), so the top-k of those
    k x block candidates is the row's."""
    q, vocab = logits.shape
    blocks = logits.reshape(q, vocab // block, block)
    best_blocks = blocks.amax(-1).topk(k, dim=-1).indices                       # (q, k)
    candidates = blocks.gather(1, best_blocks[:, :, None].expand(q, k, block)).reshape(q, k * block)
    values, at = candidates.topk(k, dim=-1)
    return values, best_blocks.gather(1, at // block) * block + at % block


class LogitTop:
    """Each row's TOP_K largest logits and their token ids, best first, and its logsumexp: one pass over
    (q, vocab) logits serves the argmax, the nodes' ranks and probabilities, the top-2 margins and the
    copy-logit table (runtime.native.logit_kernel's native pass where it runs, else torch).

    The native pass writes numpy arrays, torch's path gives tensors (on the logits' device); each form is
    made from the other only when asked for (`values` / `values_np` ...). Inside a step everything that
    reads these is numpy, and right after a forward each torch call costs tens of microseconds."""

    def __init__(self, values, ids, log_norms, tree: DraftTree | None = None, token_logits: np.ndarray | None = None,
                 token_ranks: np.ndarray | None = None, token_probs: np.ndarray | None = None,
                 entropies: np.ndarray | None = None):
        """values (q, TOP_K), ids (q, TOP_K), log_norms (q,): all numpy or all torch. tree: the tree whose
        nodes the native pass also ranked, if any; token_logits, token_ranks, token_probs (q,): per node of
        that tree, its token's logit under its parent's row, its rank there and its probability there
        (float64; the root: nan); entropies (q,): each row's softmax entropy in nats, where the native pass
        was asked for it (else None)."""
        self._numpy = isinstance(values, np.ndarray)
        self._arrays = {"values": values, "ids": ids, "log_norms": log_norms}
        self._other: dict[str, np.ndarray | torch.Tensor] = {}
        self.argmax: list[int] = ids[:, 0].tolist()  # each row's best id as Python ints
        self.tree, self.token_logits, self.token_ranks, self.token_probs = tree, token_logits, token_ranks, token_probs
        self.entropies = entropies

    def _as(self, name: str, numpy: bool):
        if numpy == self._numpy:
            return self._arrays[name]
        other = self._other.get(name)
        if other is None:
            array = self._arrays[name]
            other = self._other[name] = array.cpu().numpy() if numpy else torch.from_numpy(array)
        return other

    values = property(lambda self: self._as("values", False), doc="(q, TOP_K) tensor")
    ids = property(lambda self: self._as("ids", False), doc="(q, TOP_K) tensor")
    log_norms = property(lambda self: self._as("log_norms", False), doc="(q,) tensor")
    values_np = property(lambda self: self._as("values", True), doc="(q, TOP_K) float32 array")
    ids_np = property(lambda self: self._as("ids", True), doc="(q, TOP_K) int64 array")
    log_norms_np = property(lambda self: self._as("log_norms", True), doc="(q,) float32 array")

    @classmethod
    def of(cls, logits: torch.Tensor, tree: DraftTree | None = None, entropies: bool = False,
           summary: DeviceSummary | None = None) -> "LogitTop":
        """tree: the tree whose node i is logits row i; where the native pass runs it ranks the nodes too,
        and with entropies=True also gives each row's entropy (in the same pass). summary: what the captured
        verify forward made of these logits on the device (runtime.verify_output): used as is."""
        if summary is not None and (tree is None or len(tree) == logits.shape[0]):
            return cls.from_device_summary(summary.rows, tree)
        if tree is not None and len(tree) == logits.shape[0] \
                and (lib := logit_kernel.usable(logits, TOP_K)) is not None:
            values, ids, log_norms, token_logits, ranks, probs, row_entropies = logit_kernel.summarise(
                lib, logits, TOP_K, tree.parents[1:], tree.tokens[1:], entropies)
            return cls(values, ids, log_norms, tree, token_logits, ranks, probs, row_entropies)
        return cls(*top_logits(logits, TOP_K))


    @classmethod
    def from_device_summary(cls, rows: np.ndarray, tree: DraftTree | None) -> "LogitTop":
        """What runtime.captured_forward.summarise computed on the device (one row per node, root first):
        the numbers the native pass gives on a CPU. tree: the tree the rows' node columns were made for."""
        k = (rows.shape[1] - 4) // 2
        values = np.ascontiguousarray(rows[:, :k])
        ids = rows[:, k:2 * k].astype(np.int64)
        log_norms = np.ascontiguousarray(rows[:, 2 * k])
        if tree is None:
            return cls(values, ids, log_norms)
        token_logits = np.ascontiguousarray(rows[:, 2 * k + 1])
        ranks = rows[:, 2 * k + 2].astype(np.int64)
        entropies = np.ascontiguousarray(rows[:, 2 * k + 3])
        probs = np.exp(token_logits.astype(np.float64) - log_norms[np.asarray([0, *tree.parents[1:]])])
        token_logits[0], ranks[0], probs[0] = 0.0, -1, np.nan  # the root has no parent row
        return cls(values, ids, log_norms, tree, token_logits, ranks, probs, entropies)


def log_normalisers(logits: torch.Tensor, top_values: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
    """logsumexp of every row, read off softmax at the row's largest logit (top_values / top_ids: each
    row's best first): x_max - log p_max. On a CPU softmax's fused kernel takes a third of the time of
    torch.logsumexp (65 x 49,152: 0.68 against 2.2 ms; log_softmax 0.84); they agree to a few 1e-6."""
    if logits.device.type != "cpu":
        return torch.logsumexp(logits, dim=-1)
    p_max = torch.softmax(logits, dim=-1).gather(1, top_ids[:, :1])[:, 0]
    return top_values[:, 0] - p_max.log()


def top_logits(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's k largest logits and their ids, best first (equal values lowest id first), and its
    logsumexp: the native pass where it runs, else torch (the same values and ids, bar which of more than
    k equal values make the cut; norms agree to ~1e-6)."""
    vocab = logits.shape[1]
    if (lib := logit_kernel.usable(logits, k)) is not None:
        return tuple(torch.from_numpy(array) for array in logit_kernel.summarise(lib, logits, k))
    if logits.device.type == "cpu" and vocab % TOP_BLOCK == 0 and vocab >= 4 * k * TOP_BLOCK:
        values, ids = blockwise_topk(logits, k, TOP_BLOCK)
    else:
        values, ids = logits.topk(min(k, vocab), dim=-1)
    # topk orders equal values as it likes; put them lowest id first, as torch.argmax and the native pass do
    ids, by_id = ids.sort(dim=-1)
    values, by_value = values.gather(1, by_id).sort(dim=-1, descending=True, stable=True)
    ids = ids.gather(1, by_value)
    return values, ids, log_normalisers(logits, values, ids)


def node_target_stats(tree: DraftTree, logits: torch.Tensor,
                      top: LogitTop) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Target probability and rank of every draft node's token under its parent's logits, and the
    logsumexp of every node's logits. The native pass ranked the nodes already where it ran; else a token
    in its parent's top-K takes its logit and rank from there, and only the nodes outside it read their
    parent's whole row (a rank count). Probabilities in float64 (the root: nan; its rank: -1)."""
    log_norms = top.log_norms_np
    if top.tree is tree:  # the native pass computed all three while each parent's row was in cache
        return top.token_probs, top.token_ranks, log_norms
    n = len(tree)
    probs = np.full(n, np.nan)
    ranks = np.full(n, -1, dtype=np.int64)
    if n > 1:
        token_logits, ranks[1:] = _node_ranks_torch(tree, logits, top)
        parent_norms = log_norms[tree.parents[1:]]
        probs[1:] = np.exp(token_logits.astype(np.float64) - parent_norms)
    return probs, ranks, log_norms


def _node_ranks_torch(tree: DraftTree, logits: torch.Tensor, top: LogitTop) -> tuple[np.ndarray, np.ndarray]:
    """For nodes 1..n-1: the token's logit under its parent's row and its rank there (the native pass's
    numbers, in torch)."""
    n = len(tree)
    top_values, top_ids = top.values_np, top.ids_np.tolist()
    token_logits = np.empty(n - 1, dtype=np.float32)
    ranks = np.empty(n - 1, dtype=np.int64)
    outside = []
    for node in range(1, n):
        parent, token = tree.parents[node], tree.tokens[node]
        row = top_ids[parent]
        if token in row:
            ranks[node - 1] = rank = row.index(token)
            token_logits[node - 1] = top_values[parent, rank]
        else:
            outside.append(node)
    if outside:
        parents = torch.tensor([tree.parents[node] for node in outside], device=logits.device)
        tokens = torch.tensor([tree.tokens[node] for node in outside], device=logits.device)
        rows = logits.index_select(0, parents)
        picked = rows.gather(1, tokens[:, None])
        at = np.asarray(outside) - 1
        # an int32 count: summing the comparisons into int64 took twice as long here
        ranks[at] = (rows > picked).sum(-1, dtype=torch.int32).cpu().numpy()
        token_logits[at] = picked[:, 0].cpu().numpy()
    return token_logits, ranks


def make_verification(tree: DraftTree, logits: torch.Tensor, path: list[int], bonus: int,
                      compared: set[int], relaxed: set[int] = frozenset(), top: LogitTop | None = None,
                      transferred: set[int] = frozenset(), summary: DeviceSummary | None = None) -> Verification:
    """Statuses: relaxed, transferred or accepted on the path; rejected if compared against the target
    and refused; else unreached."""
    on_path = set(path)
    statuses = [_ROOT] + [_RELAXED if n in relaxed else _TRANSFERRED if n in transferred else
                          _ACCEPTED if n in on_path else
                          _REJECTED if n in compared else _UNREACHED for n in range(1, len(tree))]
    top = top if top is not None else LogitTop.of(logits, tree, summary=summary)
    probs, ranks, log_norms = node_target_stats(tree, logits, top)
    return Verification(path=path, accepted_draft_tokens=[tree.tokens[n] for n in path], bonus_token=int(bonus),
                        statuses=statuses, target_probs=probs, target_ranks=ranks, log_norms=log_norms, top=top)
