"""`python -m specviz train-head`: train the draft head (runtime.draft_head) for the loaded target on this
machine's CPU, from the text of tools.head_corpus, and cache it per model.

1. Text: the target's shipped answers, Python's reference documentation and library code, and the target's
   own sampled answers to the project's prompts (generated here, seeded); the suite guard drops anything
   that overlaps a benchmark suite.
2. The draft vocabulary (FR-Spec): the `draft_vocab` tokens most frequent in the answers, the end tokens
   always among them.
3. Features: one target forward per conversation gives f_t at every position (the final norm's output);
   the target's distribution over the draft vocabulary is softmax(W_draft f_t), recomputed when needed.
4. Training (EAGLE's losses, EAGLE-3's training-time test): at step 0 the head reads the true f_{t-1} and
   token t and predicts f_t; at step k it reads its own step k-1 prediction instead, attending to the true
   entries up to t - k and its own earlier steps' entries on the diagonal, as it does when it drafts at
   depth k + 1. Loss per step: smooth-L1 between predicted and true features plus `cls_weight` times the
   cross-entropy of the head's distribution against the target's, on the answers' positions only.
5. The held-out tenth of the conversations gives the top-1 agreement with the target at each step (how
   often a greedy draft at depth 1, 2, 3 would be the target's token), recorded in the file.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from specviz.errors import SpecvizError
from specviz.runtime.draft_head import (HeadNetwork, HeadRecord, head_path, save_head, target_identity,
                                        target_shape)
from specviz.runtime.loaded_model import LoadedModel
from specviz.tools.head_corpus import (Conversation, SuiteGuard, guarded, project_prompts, python_code,
                                       python_reference, shipped_answers)


@dataclass
class TrainConfig:
    draft_vocab: int = 8192        # tokens the head drafts (FR-Spec's frequency-ranked subset)
    intermediate: int = 1536       # the head layer's MLP width
    unroll: int = 3                # training-time test steps (depths trained)
    epochs: int = 2
    seq_len: int = 512             # tokens per conversation (longer ones are cut)
    batch: int = 2
    lr: float = 1e-3
    cls_weight: float = 0.5
    docs_chars: int = 120_000      # Python reference documentation
    code_chars: int = 60_000       # Python library code
    generate_per_prompt: int = 1   # sampled answers per project prompt (0: none)
    generate_tokens: int = 192
    generate_temperature: float = 0.8
    generate_prompts: int | None = None   # how many project prompts to answer (None: all)
    holdout: float = 0.1
    seed: int = 0
    bf16: bool = True              # autocast the head's training to bf16 where the CPU has it


@dataclass
class TrainReport:
    path: str
    seconds: dict = field(default_factory=dict)    # per phase
    conversations: dict = field(default_factory=dict)  # per source
    dropped_by_guard: int = 0
    train_tokens: int = 0
    answer_tokens: int = 0
    draft_vocab: int = 0
    draft_vocab_coverage: float = 0.0   # share of the answers' tokens inside the draft vocabulary
    steps: int = 0
    final_loss: float = 0.0
    top1_by_depth: list = field(default_factory=list)   # held-out agreement with the target at depth 1..unroll
    head_weights: int = 0


@dataclass
class Sequence:
    ids: torch.Tensor       # (n,)
    answer_from: int        # first position whose next token is part of the answer
    features: torch.Tensor | None = None   # (n, hidden) fp32


def _log_default(line: str) -> None:
    pass


# ---- 1. text ---------------------------------------------------------------------------------------------
def generate_answers(lm: LoadedModel, prompts: list[str], config: TrainConfig,
                     log: Callable[[str], None] = _log_default) -> list[Conversation]:
    """The target's sampled answers (temperature config.generate_temperature, seeded), in batches."""
    from specviz.runtime.prompts import encode

    tokenizer = lm.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(lm.eos_ids))
    found, started, batch_size = [], time.perf_counter(), 16
    generator_seed = config.seed
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start:start + batch_size]
        encoded = [encode(tokenizer, p, lm.max_context) for p in batch]
        width = max(len(ids) for ids in encoded)
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=lm.device)
        attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=lm.device)
        torch.manual_seed(generator_seed + start)
        with torch.inference_mode():
            out = lm.model.generate(input_ids=ids, attention_mask=attention, do_sample=True, top_p=0.95,
                                    temperature=config.generate_temperature, max_new_tokens=config.generate_tokens,
                                    pad_token_id=pad)
        for prompt, row in zip(batch, out[:, width:].tolist()):
            end = next((i for i, t in enumerate(row) if t in lm.eos_ids), len(row))
            text = tokenizer.decode(row[:end], skip_special_tokens=True).strip()
            if text:
                found.append(Conversation("generated", prompt, text))
        log(f"generated {len(found)} answers, {time.perf_counter() - started:.0f} s")
    return found


def collect(lm: LoadedModel, config: TrainConfig, log: Callable[[str], None] = _log_default
            ) -> tuple[list[Conversation], int]:
    """Every conversation the head trains on, and how many the suite guard dropped."""
    conversations = shipped_answers() + python_reference(config.docs_chars) + python_code(config.code_chars)
    if config.generate_per_prompt:
        prompts = list(project_prompts().values())[:config.generate_prompts]
        conversations += generate_answers(lm, prompts * config.generate_per_prompt, config, log)
    return guarded(conversations, SuiteGuard())


def tokenize(lm: LoadedModel, conversation: Conversation, seq_len: int) -> Sequence | None:
    """The conversation under the chat template, cut to seq_len tokens; None when no answer is left."""
    tokenizer = lm.tokenizer
    messages = conversation.messages()
    prompt = tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=True)
    full = tokenizer.apply_chat_template(messages, tokenize=True)
    prompt, full = list(getattr(prompt, "input_ids", prompt)), list(getattr(full, "input_ids", full))
    if full[:len(prompt)] != prompt or len(prompt) >= min(len(full), seq_len) - 1:
        return None
    return Sequence(torch.tensor(full[:seq_len]), len(prompt) - 1)


# ---- 2. the draft vocabulary --------------------------------------------------------------------------
def draft_vocabulary(lm: LoadedModel, sequences: list[Sequence], size: int) -> tuple[torch.Tensor, float]:
    """The size tokens most frequent in the answers (the end tokens first; when the answers hold fewer
    distinct tokens, the lowest ids fill the rest: a BPE vocabulary numbers its merges by frequency), and
    the share of the answers' tokens they hold."""
    counts = Counter()
    for s in sequences:
        counts.update(s.ids[s.answer_from + 1:].tolist())
    must = sorted({int(t) for t in lm.eos_ids if 0 <= int(t) < lm.vocab_size})
    chosen = must + [t for t, _ in counts.most_common() if t not in must][:max(0, size - len(must))]
    taken = set(chosen)
    chosen += [t for t in range(lm.vocab_size) if t not in taken][:max(0, min(size, lm.vocab_size) - len(chosen))]
    total = sum(counts.values())
    coverage = sum(counts[t] for t in chosen) / total if total else 0.0
    return torch.tensor(sorted(chosen), dtype=torch.long), coverage


# ---- 3. features ------------------------------------------------------------------------------------------
@torch.inference_mode()
def add_features(lm: LoadedModel, sequences: list[Sequence], log: Callable[[str], None] = _log_default) -> None:
    """Each sequence's target features, one causal forward of the base model each."""
    decoder = lm.model.get_decoder()
    started = time.perf_counter()
    for i, s in enumerate(sequences):
        hidden = decoder(input_ids=s.ids[None].to(lm.device)).last_hidden_state[0]
        s.features = hidden.float().cpu()
        if (i + 1) % 50 == 0:
            log(f"features of {i + 1}/{len(sequences)} conversations, {time.perf_counter() - started:.0f} s")


# ---- 4. training --------------------------------------------------------------------------------------------
def unrolled_mask(n: int, step: int) -> torch.Tensor:
    """Visibility (n, (step + 1) n), True = attend, of step `step`'s queries over the keys of steps 0..step:
    query t sees step 0's keys up to t - step and step j's key at t - step + j (its own draft path)."""
    t = torch.arange(n)[:, None]
    s = torch.arange(n)[None, :]
    blocks = [s <= t - step] + [s == t - step + j for j in range(1, step + 1)]
    visible = torch.cat(blocks, dim=1)
    # a query with nothing visible (t < step) would make the softmax empty: let it see its own key
    visible[:, -n:] |= torch.eye(n, dtype=torch.bool)
    return visible


def _batches(sequences: list[Sequence], size: int, rng: random.Random) -> list[list[Sequence]]:
    order = sorted(sequences, key=lambda s: len(s.ids))  # similar lengths together: little padding
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    rng.shuffle(batches)
    return batches


def _pad(batch: list[Sequence], hidden: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids (b, n), features (b, n, hidden), loss mask (b, n): position t counts when its next token is an
    answer token of the sequence."""
    n = max(len(s.ids) for s in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    features = torch.zeros(len(batch), n, hidden)
    mask = torch.zeros(len(batch), n, dtype=torch.bool)
    for row, s in enumerate(batch):
        ids[row, :len(s.ids)] = s.ids
        features[row, :len(s.ids)] = s.features
        mask[row, s.answer_from:len(s.ids) - 1] = True
    return ids, features, mask


def unrolled_losses(network: HeadNetwork, embed: torch.nn.Module, batch: list[Sequence], unroll: int,
                    cls_weight: float, top1_weight: float = 0.0) -> tuple[list[torch.Tensor], list[tuple[int, int]]]:
    """Per training-time-test step: the loss, and (agreeing top-1 tokens, positions) of the step."""
    from transformers.cache_utils import DynamicCache

    hidden = network.shape.hidden
    ids, target, mask = _pad(batch, hidden)
    n = ids.shape[1]
    with torch.no_grad():
        embeds = embed(ids).float()
        target_logits = network.draft_logits(target).float()
        target_probs = torch.softmax(target_logits, dim=-1)
        target_top = target_logits.argmax(-1)
    positions = torch.arange(n)[None].expand(len(batch), n)
    cache = DynamicCache(config=network.body.config)
    previous = F.pad(target[:, :-1], (0, 0, 1, 0))    # f_{t-1} at t (zeros at 0)
    losses, agreement = [], []
    for step in range(unroll):
        predicted = network.train_forward(embeds, previous, positions, unrolled_mask(n, step)[None, None],
                                                 cache)
        valid = mask.clone()
        valid[:, :step + 1] = False
        weight = valid.float()
        count = weight.sum().clamp_min(1.0)
        regression = (F.smooth_l1_loss(predicted.float(), target, reduction="none").mean(-1) * weight).sum() / count
        logits = network.draft_logits(predicted).float()
        log_q = torch.log_softmax(logits, dim=-1)
        cross = (-(target_probs * log_q).sum(-1) * weight).sum() / count
        loss = regression + cls_weight * cross
        if top1_weight:  # greedy drafts are accepted where the target's best token is the head's best
            loss = loss + top1_weight * (-log_q.gather(-1, target_top[..., None])[..., 0] * weight).sum() / count
        losses.append(loss)
        agreement.append((int(((logits.argmax(-1) == target_top) & valid).sum()), int(valid.sum())))
        previous = F.pad(predicted[:, :-1].detach(), (0, 0, 1, 0))
    return losses, agreement


def train(lm: LoadedModel, config: TrainConfig = TrainConfig(), out: Path | None = None,
          log: Callable[[str], None] = _log_default) -> TrainReport:
    """Steps 1-5 of the module doc; the head is saved to out (default: this target's cache file)."""
    if not (getattr(lm.model.config, "model_type", "") and lm.model.get_output_embeddings() is not None):
        raise SpecvizError(f"{lm.name} has no output embedding to draft over: no draft head for it.")
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    report = TrainReport(path=str(out or head_path(lm)))
    clock = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[name] = round(now - clock, 1)
        clock = now

    conversations, report.dropped_by_guard = collect(lm, config, log)
    phase("text")
    sequences = [s for s in (tokenize(lm, c, config.seq_len) for c in conversations) if s is not None]
    if len(sequences) < 2:
        raise SpecvizError("Too little text to train a draft head on.")
    for c in conversations:
        report.conversations[c.source] = report.conversations.get(c.source, 0) + 1
    report.train_tokens = sum(len(s.ids) for s in sequences)
    report.answer_tokens = sum(len(s.ids) - 1 - s.answer_from for s in sequences)
    draft_ids, report.draft_vocab_coverage = draft_vocabulary(lm, sequences, config.draft_vocab)
    report.draft_vocab = len(draft_ids)
    log(f"{len(sequences)} conversations, {report.train_tokens} tokens ({report.answer_tokens} in answers); draft "
        f"vocabulary {len(draft_ids)} tokens holding {100 * report.draft_vocab_coverage:.1f}% of the answers' tokens")
    add_features(lm, sequences, log)
    phase("features")

    shape = target_shape(lm, config.intermediate, len(draft_ids))
    network = HeadNetwork(lm, shape, draft_ids)
    network.body.model.norm.weight.data.copy_(_final_norm_weight(lm))
    network.train()
    report.head_weights = sum(p.numel() for name, p in network.named_parameters() if p.requires_grad)
    embed = lm.model.get_input_embeddings()
    rng.shuffle(sequences)
    held = max(1, int(len(sequences) * config.holdout))
    holdout, training = sequences[:held], sequences[held:]
    parameters = [p for p in network.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    total_steps = config.epochs * math.ceil(len(training) / config.batch)
    warmup = max(1, total_steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, s / max(1, total_steps)))))
    autocast = config.bf16 and lm.device.type == "cpu" and _cpu_has_bf16()
    step, recent = 0, []
    for epoch in range(config.epochs):
        for batch in _batches(training, config.batch, rng):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                losses, _ = unrolled_losses(network, embed, batch, config.unroll, config.cls_weight)
            loss = sum(losses) / len(losses)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 0.5)
            optimizer.step()
            schedule.step()
            step += 1
            recent.append(float(loss.detach()))
            if step % 25 == 0:
                log(f"epoch {epoch + 1} step {step}/{total_steps}: loss {sum(recent[-25:]) / len(recent[-25:]):.4f}, "
                    f"{time.perf_counter() - clock:.0f} s")
    report.steps, report.final_loss = step, round(sum(recent[-25:]) / max(1, len(recent[-25:])), 5)
    phase("training")
    report.top1_by_depth = evaluate(network, embed, holdout, config)
    phase("evaluation")
    log(f"held-out top-1 agreement with the target by depth: {report.top1_by_depth}")
    network.eval()
    record = HeadRecord(target=target_identity(lm), shape=shape, training={
        "config": asdict(config), "report": {k: v for k, v in asdict(report).items() if k != "path"},
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__,
        "threads": torch.get_num_threads()})
    save_head(network, record, Path(report.path))
    return report


@torch.no_grad()
def evaluate(network: HeadNetwork, embed: torch.nn.Module, sequences: list[Sequence], config: TrainConfig) -> list:
    network.eval()
    totals = [[0, 0] for _ in range(config.unroll)]
    for batch in [sequences[i:i + config.batch] for i in range(0, len(sequences), config.batch)]:
        _, agreement = unrolled_losses(network, embed, batch, config.unroll, config.cls_weight)
        for total, (agree, count) in zip(totals, agreement):
            total[0] += agree
            total[1] += count
    network.train()
    return [round(a / c, 3) if c else 0.0 for a, c in totals]


def _final_norm_weight(lm: LoadedModel) -> torch.Tensor:
    """The target's final norm weight (the head's norm starts from it: the features' scale per dimension)."""
    norm = getattr(lm.model.get_decoder(), "norm", None)
    weight = getattr(norm, "weight", None)
    hidden = lm.model.config.hidden_size
    return weight.detach().float().cpu() if weight is not None and weight.shape == (hidden,) else torch.ones(hidden)


def _cpu_has_bf16() -> bool:
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text() or "amx_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
