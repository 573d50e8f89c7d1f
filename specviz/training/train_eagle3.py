"""What `train-head --shape eagle3` does differently from the trained head (training.train_head runs both).

- Features: the hidden states entering the target's layers 2, N // 2 and N - 3, fused (runtime.feature_tap), from the
  forwards that wrote the target's answers or one batched causal forward of the shipped text; the final-norm feature
  only gives the target's distribution.
- Loss: EAGLE-3's, the cross-entropy against the target's distribution over the draft vocabulary alone (no feature
  regression: the head's output need not be the target's feature), at every training-time-test step, each step
  reading the previous step's output h as its feature with its gradient (EAGLE-3's recipe: a later step's loss
  back-propagates through the steps before it; until issue 72 each step's input was detached).
- File: a folder in EAGLE-3's layout with specviz's record (runtime.trained_eagle3)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from specviz.runtime.draft_head import HeadShape, head_config
from specviz.runtime.feature_tap import eagle3_tap
from specviz.runtime.loaded_model import LoadedModel
from specviz.training.eagle3_network import Eagle3Network
from specviz.training.progress_bar import ProgressBar
from specviz.training.unrolled_mask import unrolled_mask

FEATURE_BATCH_TOKENS = 4096   # tokens per batched feature forward (padded)


def eagle3_layers(lm: LoadedModel) -> tuple[int, ...]:
    """The target layers an EAGLE-3 head fuses (SpecvizError-free: a target under 7 layers gets fewer)."""
    return eagle3_tap(int(lm.model.config.num_hidden_layers)).layers


@torch.inference_mode()
def add_fused_features(lm: LoadedModel, sequences: list, log: Callable[[str], None]) -> None:
    """Each sequence's final features and fused tap, in right-padded batches of similar lengths (a causal forward
    never reads the padding after a row's own tokens)."""
    layers = eagle3_layers(lm)
    decoder = lm.model.get_decoder()
    order = sorted(sequences, key=lambda s: len(s.ids))
    bar = ProgressBar("features: the target reads the shipped text (EAGLE-3 tap)", len(order), log)
    first = 0
    while first < len(order):
        longest = len(order[first].ids)
        batch = [order[first]]
        while first + len(batch) < len(order) and \
                (len(batch) + 1) * max(longest, len(order[first + len(batch)].ids)) <= FEATURE_BATCH_TOKENS:
            batch.append(order[first + len(batch)])
            longest = max(longest, len(batch[-1].ids))
        ids = torch.zeros(len(batch), longest, dtype=torch.long)
        for row, s in enumerate(batch):
            ids[row, :len(s.ids)] = s.ids
        out = decoder(input_ids=ids.to(lm.device), output_hidden_states=True)
        fused = torch.cat([out.hidden_states[i] for i in layers], dim=-1).float().cpu()
        final = out.last_hidden_state.float().cpu()
        for row, s in enumerate(batch):
            s.features, s.fused = final[row, :len(s.ids)].clone(), fused[row, :len(s.ids)].clone()
        first += len(batch)
        bar.advance(len(batch))


def eagle3_network(lm: LoadedModel, shape: HeadShape, draft_ids: torch.Tensor,
                   norm_init: torch.Tensor) -> Eagle3Network:
    rows = lm.model.get_output_embeddings().weight.detach().float().cpu().index_select(0, draft_ids.cpu())
    eps = float(getattr(lm.model.config, "rms_norm_eps", 1e-6))
    return Eagle3Network(shape, eps, head_config(lm, shape), rows, draft_ids, norm_init)


def _pad(batch: list, hidden: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids (b, n), final features (b, n, hidden), fused (b, n, 3 hidden), loss mask (b, n): position t counts when
    its next token is an answer token."""
    n = max(len(s.ids) for s in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    final = torch.zeros(len(batch), n, hidden)
    fused = torch.zeros(len(batch), n, batch[0].fused.shape[-1])
    mask = torch.zeros(len(batch), n, dtype=torch.bool)
    for row, s in enumerate(batch):
        ids[row, :len(s.ids)] = s.ids
        final[row, :len(s.ids)] = s.features
        fused[row, :len(s.ids)] = s.fused
        mask[row, s.answer_from:len(s.ids) - 1] = True
    return ids, final, fused, mask


def drafting_view(n: int, step: int) -> torch.Tensor:
    """training.train_head.unrolled_mask without the key of position 0 for the later positions: the head drafts
    with no entry for the context's first token (it has no feature before it; drafters.head), so no query
    learns to lean on one."""
    visible = unrolled_mask(n, step)
    visible[1:, 0] = False
    return visible


def eagle3_losses(network: Eagle3Network, embed: torch.nn.Module, batch: list, unroll: int,
                  cls_weight: float) -> tuple[list[torch.Tensor], list[tuple[int, int]]]:
    """Per training-time-test step: the loss, and (agreeing top-1 tokens, positions) of the step. Position t pairs
    the token at t with the fused feature at t - 1 and predicts the target's distribution at t. cls_weight is
    unused: the cross-entropy is the whole loss (kept for train_head's one signature)."""
    ids, final, fused, mask = _pad(batch, network.shape.hidden)
    n = ids.shape[1]
    with torch.no_grad():
        embeds = embed(ids).float()
        target_logits = network.lm_head(final).float()   # the target's own head over the draft vocabulary
        target_probs = torch.softmax(target_logits, dim=-1)
        target_top = target_logits.argmax(-1)
    positions = torch.arange(n)[None].expand(len(batch), n)
    features = F.pad(fused[:, :-1], (0, 0, 1, 0))   # the fused feature at t - 1 (zeros at 0)
    past: list = []
    losses, agreement = [], []
    for step in range(unroll):
        h = network.step(embeds, features, positions, drafting_view(n, step), past)
        valid = mask.clone()
        valid[:, :step + 1] = False
        weight = valid.float()
        logits = network.draft_logits(h).float()
        cross = -(target_probs * torch.log_softmax(logits, dim=-1)).sum(-1)
        losses.append((cross * weight).sum() / weight.sum().clamp_min(1.0))
        agreement.append((int(((logits.argmax(-1) == target_top) & valid).sum()), int(valid.sum())))
        # the next step reads this step's output at t - 1, its gradient kept: step k's loss trains what steps < k
        # wrote as well (EAGLE-3's training-time test), not only how step k reads it
        features = F.pad(h[:, :-1], (0, 0, 1, 0))
    return losses, agreement
