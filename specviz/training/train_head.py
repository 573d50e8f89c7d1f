"""`python -m specviz train-head`: train a draft head for the loaded target on this machine's CPU, and cache it per
model, in one of two shapes (`--shape`, TrainConfig.head_shape):

- `specviz` (the default): the trained head (runtime.draft_head, `--draft-model head`), one layer over the target's
  own final-norm feature, its losses EAGLE's (smooth-L1 on the feature plus `cls_weight` times the cross-entropy
  against the target's distribution), written to the target's cache file;
- `eagle3`: EAGLE-3's shape (training.eagle3_network, `--draft-model head-eagle3`), over three of the target's layers
  fused, its loss the cross-entropy alone, written as a folder in EAGLE-3's layout (training.train_eagle3 holds what
  it does differently; runtime.trained_eagle3 reads it).

Both share the rest: the text comes from training.head_corpus (the target's shipped answers, Python's documentation
and code, answers the target writes here); the draft vocabulary is the answers' most frequent tokens (FR-Spec);
EAGLE-3's training-time test unrolls `unroll` steps (2 for specviz, 3 for eagle3 unless told); a held-out tenth of
the conversations gives the top-1 agreement at each depth, recorded in the file.

Design notes: docs/design.md, "specviz/training/train_head.py".
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
from specviz.runtime.linear_paths import processor_name
from specviz.runtime.loaded_model import LoadedModel
from specviz.training.progress_bar import ProgressBar
from specviz.training.unrolled_mask import unrolled_mask
from specviz.training.head_corpus import (Conversation, SuiteGuard, guarded, library_questions, project_prompts,
                                       python_code, python_reference, request_prompt, shipped_answers,
                                       topic_questions, usable_request)


SPECVIZ_SHAPE, EAGLE3_SHAPE = "specviz", "eagle3"
HEAD_SHAPES = (SPECVIZ_SHAPE, EAGLE3_SHAPE)
EAGLE3_UNROLL = 3   # `--shape eagle3`'s training-time-test steps unless told (EAGLE-3 trains deeper than our head)
REQUEST_TOKENS = 64   # at most, per new request the target writes (self-instruct)
SAMPLE_TOP = 1024     # the target's answers are sampled among its best this many tokens


@dataclass
class TrainConfig:
    draft_vocab: int = 8192        # tokens the head drafts (FR-Spec's frequency-ranked subset)
    intermediate: int = 1536       # the head layer's MLP width
    unroll: int = 2                # training-time test steps (depths trained; beyond 2 the head is rarely right)
    epochs: int = 3
    seq_len: int = 512             # tokens per conversation (longer ones are cut)
    batch: int = 2
    lr: float = 1e-3
    cls_weight: float = 0.5
    docs_chars: int = 120_000      # Python reference documentation
    code_chars: int = 60_000       # Python library code
    generate_per_prompt: int = 2   # sampled answers per project prompt (0: none)
    generate_tokens: int = 160     # at most, per answer the target writes
    generate_temperature: float = 0.8
    generate_prompts: int | None = None   # how many project prompts to answer (None: all)
    generate_batch: int = 32       # answers written at once (a batch of 32 writes about 2x the tokens/s of 8)
    questions: int | None = 400    # greedy answers to questions on Python topics and functions (None: all)
    requests_per_prompt: int = 2   # new requests the target writes after each project prompt, answered greedily
    holdout: float = 0.1
    seed: int = 0
    bf16: bool = True              # autocast the head's training to bf16 where the CPU has it
    head_shape: str = SPECVIZ_SHAPE  # or EAGLE3_SHAPE: three fused layers, its own file (training.train_eagle3)


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
    fused: torch.Tensor | None = None      # (n, 3 hidden) fp32: the EAGLE-3 tap (config.head_shape eagle3 only)


def _log_default(line: str) -> None:
    pass


# ---- 1. text ---------------------------------------------------------------------------------------------
@torch.inference_mode()
def _generate(lm: LoadedModel, prompts: list[list[int]], max_new: int, temperature: float, seed: int,
              batch_size: int, progress: Callable[[int], None] | None = None, layers: tuple[int, ...] = ()
              ) -> list[tuple[list[int], list[int], torch.Tensor]]:
    """The target's answers to prompts (token ids), greedy at temperature 0, else sampled (top-p 0.95,
    seeded), in left-padded batches of similar lengths: (prompt, answer up to and with its end token, the
    target's features at every position of prompt + answer) each, in the prompts' order. The features come
    from the generating forwards themselves (no second pass); the last token's row is zeros (never fed). A row
    that wrote its end token leaves the batch (its cache rows too): the forwards after it read the weights
    for the rows still writing only. progress(n): n more answers done. layers: the hidden states entering these
    decoder layers follow the final feature in each row (an EAGLE-3 tap: (n, hidden + len(layers) hidden))."""
    from transformers.cache_utils import DynamicCache

    tokenizer = lm.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(lm.eos_ids))
    ends = torch.tensor(sorted(lm.eos_ids), dtype=torch.long)
    decoder, head = lm.model.get_decoder(), lm.model.get_output_embeddings()
    generator = torch.Generator().manual_seed(seed)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results: dict[int, tuple[list[int], list[int], torch.Tensor]] = {}
    for first in range(0, len(order), batch_size):
        chosen = order[first:first + batch_size]
        encoded = [prompts[i] for i in chosen]
        width = max(len(e) for e in encoded)
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=lm.device)
        attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=lm.device)
        positions = (attention.cumsum(-1) - 1).clamp_min(0)
        cache = DynamicCache(config=lm.model.config)
        out = decoder(input_ids=ids, attention_mask=attention, position_ids=positions, past_key_values=cache,
                      use_cache=True, output_hidden_states=bool(layers))
        hidden = out.last_hidden_state
        prefill = _with_taps(out, layers).float().cpu()
        rows = [[prefill[row, width - len(e):]] for row, e in enumerate(encoded)]  # each row's features
        tokens: list[list[int]] = [[] for _ in encoded]
        alive = list(range(len(encoded)))   # the batch's rows still writing, in the cache's order
        for step in range(max_new):
            logits = head(hidden[:, -1]).float().cpu()
            if temperature > 0:  # top-p 0.95 within the best SAMPLE_TOP tokens (a full sort per step is slow)
                probs = torch.softmax(logits / temperature, dim=-1)
                ranked, index = probs.topk(min(SAMPLE_TOP, probs.shape[-1]), dim=-1)
                ranked[(ranked.cumsum(-1) - ranked) > 0.95] = 0.0
                token = index.gather(-1, torch.multinomial(ranked, 1, generator=generator))[:, 0]
            else:
                token = logits.argmax(-1)
            for j, row in enumerate(alive):
                tokens[row].append(int(token[j]))
            if step == max_new - 1:
                break
            keep = (~torch.isin(token, ends)).nonzero()[:, 0]
            if len(keep) == 0:
                break
            if len(keep) < len(alive):  # finished rows leave the batch
                cache.batch_select_indices(keep.to(lm.device))
                attention, positions, token = attention[keep], positions[keep], token[keep]
                alive = [alive[j] for j in keep.tolist()]
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
            out = decoder(input_ids=token[:, None].to(lm.device), attention_mask=attention, position_ids=positions,
                          past_key_values=cache, use_cache=True, output_hidden_states=bool(layers))
            hidden = out.last_hidden_state
            written = _with_taps(out, layers)[:, -1].float().cpu()
            for j, row in enumerate(alive):
                rows[row].append(written[j:j + 1])
        for row, index in enumerate(chosen):
            answer = tokens[row]
            answer = answer[:next((i + 1 for i, t in enumerate(answer) if t in lm.eos_ids), len(answer))]
            prompt, n = encoded[row], len(encoded[row]) + len(answer)
            mine = torch.cat(rows[row])[:n]
            mine = torch.cat([mine, torch.zeros(n - len(mine), mine.shape[-1])])
            results[index] = (prompt, answer, mine)
        if progress is not None:
            progress(len(chosen))
    return [results[i] for i in range(len(prompts))]


def tap_layers(lm: LoadedModel, config: TrainConfig) -> tuple[int, ...]:
    """The target layers whose inputs the head reads besides the final feature (EAGLE-3's three; none)."""
    from specviz.training.train_eagle3 import eagle3_layers

    return eagle3_layers(lm) if config.head_shape == EAGLE3_SHAPE else ()


def _with_taps(out, layers: tuple[int, ...]) -> torch.Tensor:
    """A decoder output's final features followed by the hidden states entering `layers` (b, n, (1 + len) hidden)."""
    if not layers:
        return out.last_hidden_state
    return torch.cat([out.last_hidden_state] + [out.hidden_states[i] for i in layers], dim=-1)


def generate_answers(lm: LoadedModel, prompts: list[str], config: TrainConfig, source: str, temperature: float,
                     seed: int, guard: SuiteGuard | None = None, log: Callable[[str], None] = _log_default
                     ) -> list[tuple[str, Sequence]]:
    """The target's answers to prompts (user turns) as training sequences with their features, cut to
    config.seq_len; (source, sequence) each. Answers that share a run of words with a suite (guard) are
    dropped."""
    from specviz.runtime.prompts import encode

    started = time.perf_counter()
    encoded = [encode(lm.tokenizer, [{"role": "user", "content": p}], lm.max_context) for p in prompts]
    found = []
    bar = ProgressBar(f"{source}: the target writes", len(encoded), log)
    layers = tap_layers(lm, config)
    hidden = int(lm.model.config.hidden_size)
    for prompt, answer, features in _generate(lm, encoded, config.generate_tokens, temperature, seed,
                                              config.generate_batch, bar.advance, layers):
        if not answer or len(prompt) >= config.seq_len - 1:
            continue
        if guard is not None and guard.leaks(lm.tokenizer.decode(answer, skip_special_tokens=True)):
            continue
        ids = torch.tensor((prompt + answer)[:config.seq_len])
        features = features[:len(ids)]
        found.append((source, Sequence(ids, len(prompt) - 1, features[:, :hidden],
                                       features[:, hidden:] if layers else None)))
    tokens = sum(len(s.ids) - 1 - s.answer_from for _, s in found)
    log(f"{source}: {len(found)} answers of the target, {tokens} tokens, {time.perf_counter() - started:.0f} s")
    return found


def self_instruct(lm: LoadedModel, examples: list[str], config: TrainConfig, guard: SuiteGuard,
                  log: Callable[[str], None] = _log_default) -> list[str]:
    """New requests the target writes after the project's prompts (config.requests_per_prompt sampled tries
    each; the usable ones, without repeats or suite text)."""
    from specviz.runtime.prompts import encode

    asks = [request_prompt(e) for e in examples for _ in range(config.requests_per_prompt)]
    encoded = [encode(lm.tokenizer, [{"role": "user", "content": a}], lm.max_context) for a in asks]
    bar = ProgressBar("self-instruct: the target writes requests", len(encoded), log)
    written = _generate(lm, encoded, REQUEST_TOKENS, 1.0, config.seed + 1, config.generate_batch, bar.advance)
    requests = [usable_request(lm.tokenizer.decode(answer, skip_special_tokens=True)) for _, answer, _ in written]
    return list(dict.fromkeys(r for r in requests if r and not guard.leaks(r)))


def collect(lm: LoadedModel, config: TrainConfig, log: Callable[[str], None] = _log_default
            ) -> tuple[list[tuple[str, Sequence]], int]:
    """Every training sequence, (source, sequence) each, and how many shipped texts the suite guard dropped.
    The shipped text comes tokenized (its features are added later: add_features); the target's own
    answers come with the features of the forwards that wrote them."""
    guard = SuiteGuard()
    shipped, dropped = guarded(shipped_answers() + python_reference(config.docs_chars)
                               + python_code(config.code_chars), guard)
    found = [(c.source, s) for c in shipped if (s := tokenize(lm, c, config.seq_len)) is not None]
    examples = list(project_prompts().values())[:config.generate_prompts]
    for round_ in range(config.generate_per_prompt):
        found += generate_answers(lm, examples, config, "sampled", config.generate_temperature,
                                  config.seed + 100 + round_, guard, log)
    questions = (topic_questions() + library_questions())[:config.questions]
    if questions:
        found += generate_answers(lm, questions, config, "python-questions", 0.0, config.seed, guard, log)
    if config.requests_per_prompt:
        requests = self_instruct(lm, examples, config, guard, log)
        log(f"self-instruct: the target wrote {len(requests)} usable new requests")
        found += generate_answers(lm, requests, config, "self-instruct", 0.0, config.seed, guard, log)
    return found, dropped


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
    bar = ProgressBar("features: the target reads the shipped text", len(sequences), log)
    for s in sequences:
        hidden = decoder(input_ids=s.ids[None].to(lm.device)).last_hidden_state[0]
        s.features = hidden.float().cpu()
        bar.advance()


# ---- 4. training --------------------------------------------------------------------------------------------
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
    """Steps 1-5 of the design notes (docs/design.md); the head is saved to out (default: this target's cache file,
    or for the EAGLE-3 shape its cache folder: runtime.trained_eagle3)."""
    from specviz.runtime.trained_eagle3 import eagle3_folder

    eagle3 = config.head_shape == EAGLE3_SHAPE
    if config.head_shape not in HEAD_SHAPES:
        raise SpecvizError(f"No head shape {config.head_shape!r}: choose one of {', '.join(HEAD_SHAPES)}.")
    if eagle3 and len(tap_layers(lm, config)) != 3:
        raise SpecvizError(f"EAGLE-3 fuses the inputs of layers 2, N/2 and N-3: {lm.name} has "
                           f"{lm.model.config.num_hidden_layers} layers, too few for three distinct ones (at least 7).")
    if not (getattr(lm.model.config, "model_type", "") and lm.model.get_output_embeddings() is not None):
        raise SpecvizError(f"{lm.name} has no output embedding to draft over: no draft head for it.")
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    report = TrainReport(path=str(out or (eagle3_folder(lm) if eagle3 else head_path(lm))))
    clock = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[name] = round(now - clock, 1)
        clock = now

    found, report.dropped_by_guard = collect(lm, config, log)
    phase("text")
    sequences = [s for _, s in found]
    if len(sequences) < 2:
        raise SpecvizError("Too little text to train a draft head on.")
    for source, _ in found:
        report.conversations[source] = report.conversations.get(source, 0) + 1
    report.train_tokens = sum(len(s.ids) for s in sequences)
    report.answer_tokens = sum(len(s.ids) - 1 - s.answer_from for s in sequences)
    draft_ids, report.draft_vocab_coverage = draft_vocabulary(lm, sequences, config.draft_vocab)
    report.draft_vocab = len(draft_ids)
    log(f"{len(sequences)} conversations, {report.train_tokens} tokens ({report.answer_tokens} in answers); draft "
        f"vocabulary {len(draft_ids)} tokens holding {100 * report.draft_vocab_coverage:.1f}% of the answers' tokens")
    shape = target_shape(lm, config.intermediate, len(draft_ids))
    if eagle3:
        from specviz.training.train_eagle3 import add_fused_features, eagle3_losses, eagle3_network

        add_fused_features(lm, [s for s in sequences if s.fused is None], log)
        network = eagle3_network(lm, shape, draft_ids, _final_norm_weight(lm))
        losses_of = eagle3_losses
    else:
        add_features(lm, [s for s in sequences if s.features is None], log)
        network = HeadNetwork(lm, shape, draft_ids)
        network.body.model.norm.weight.data.copy_(_final_norm_weight(lm))
        losses_of = unrolled_losses
    phase("features")
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
    bar = ProgressBar("training the head", total_steps, log)
    for epoch in range(config.epochs):
        for batch in _batches(training, config.batch, rng):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                losses, _ = losses_of(network, embed, batch, config.unroll, config.cls_weight)
            loss = sum(losses) / len(losses)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 0.5)
            optimizer.step()
            schedule.step()
            step += 1
            recent.append(float(loss.detach()))
            bar.advance()
            if step % 200 == 0:
                log(f"epoch {epoch + 1} step {step}/{total_steps}: loss {sum(recent[-25:]) / len(recent[-25:]):.4f}")
    report.steps, report.final_loss = step, round(sum(recent[-25:]) / max(1, len(recent[-25:])), 5)
    phase("training")
    report.top1_by_depth = evaluate(network, embed, holdout, config, losses_of)
    phase("evaluation")
    log(f"held-out top-1 agreement with the target by depth: {report.top1_by_depth}")
    network.eval()
    training = {"config": asdict(config), "report": {k: v for k, v in asdict(report).items() if k != "path"},
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__, "machine": processor_name(),
                "threads": torch.get_num_threads()}
    if eagle3:
        from specviz.runtime.trained_eagle3 import EAGLE3_FORMAT, EAGLE3_VERSION, write_eagle3_folder

        record = HeadRecord(target=target_identity(lm), shape=shape, training=training, format=EAGLE3_FORMAT,
                            version=EAGLE3_VERSION)
        write_eagle3_folder(lm, network.file_state(), draft_ids, record, Path(report.path))
    else:
        save_head(network, HeadRecord(target=target_identity(lm), shape=shape, training=training), Path(report.path))
    return report


@torch.no_grad()
def evaluate(network: torch.nn.Module, embed: torch.nn.Module, sequences: list[Sequence], config: TrainConfig,
             losses_of: Callable = unrolled_losses) -> list:
    network.eval()
    totals = [[0, 0] for _ in range(config.unroll)]
    for batch in [sequences[i:i + config.batch] for i in range(0, len(sequences), config.batch)]:
        _, agreement = losses_of(network, embed, batch, config.unroll, config.cls_weight)
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
