"""The default model's draft head and warm copy-logit table as the repository ships them (assets/trained/, read by
runtime.shipped): half precision, each at most MAX_BYTES, beside CARD.md, which says how they were made and what
the head accepts on the held-out prompts. Written by `python -m specviz trained-files` from a head `train-head`
made on this machine; the table is built here from the datastore corpus (drafters.copy_logit_seed)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.drafters import copy_logit_seed
from specviz.errors import SpecvizError
from specviz.runtime.draft_head import head_file_name, load_head, save_head, vocab_digest
from specviz.runtime.linear_paths import processor_name
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.shipped import COPY_LOGITS, HEADS, TRAINED

MAX_BYTES = 10 * 2**20
HELDOUT = Path(__file__).resolve().parents[2] / "assets" / "heldout.jsonl"
CARD = "CARD.md"


@dataclass(frozen=True)
class TrainedFiles:
    """What trained-files wrote, and how big each file is."""
    head: Path
    table: Path
    card: Path
    head_bytes: int
    table_bytes: int


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(lm: LoadedModel, head_source: Path, out: Path = TRAINED, quality_depth: int = 4,
          quality_tokens: int = 32) -> TrainedFiles:
    """Copy the head in head_source into out/heads in float16, build the warm table into out/copy_logits in
    float16, measure the copied head's acceptance by depth on assets/heldout.jsonl, and write out/CARD.md."""
    from specviz.benches.draft_quality import measure_draft_quality
    from specviz.studies.suite import load_suite

    source = load_head(lm, head_source)
    head = out / HEADS / head_file_name(lm.name)
    head.parent.mkdir(parents=True, exist_ok=True)
    save_head(source.network, source.record, head, torch.float16)
    started = time.perf_counter()
    table = out / COPY_LOGITS / copy_logit_seed.shipped_name(lm)
    table.parent.mkdir(parents=True, exist_ok=True)
    copy_logit_seed.save(copy_logit_seed.build(lm), table, vocab_digest(lm.tokenizer), half=True)
    table_s = time.perf_counter() - started
    for path in (head, table):
        if path.stat().st_size > MAX_BYTES:
            raise SpecvizError(f"'{path}' holds {path.stat().st_size / 2**20:.1f} MB, over the {MAX_BYTES >> 20} MB "
                               "a file the repository ships may hold: train a smaller head (--draft-vocab, "
                               "--intermediate).")
    shipped = load_head(lm, head)  # what a clone reads: its acceptance is the one the card gives
    quality = measure_draft_quality(lm, {"head": shipped}, load_suite(HELDOUT), quality_depth, quality_tokens)
    card = out / CARD
    card.write_text(card_text(lm, source.record, head, table, table_s, quality, head_source))
    return TrainedFiles(head, table, card, head.stat().st_size, table.stat().st_size)


def card_text(lm: LoadedModel, record, head: Path, table: Path, table_s: float, quality: dict,
              head_source: Path) -> str:
    training = record.training
    report = training.get("report", {})
    config = training.get("config", {})
    seconds = report.get("seconds", {})
    rows = []
    for label, r in quality.items():
        rows.append(f"| {label} | {r['mean_accepted']:.2f} | " + " | ".join(f"{x:.3f}" for x in r["accepted_to_depth"])
                    + " |")
    depths = len(next(iter(quality.values()))["accepted_to_depth"])
    return f"""# The default model's trained files

Two files the repository ships so that a fresh clone drafts with a trained head and a warm copy-logit table from
its first step (`specviz/runtime/shipped.py` reads them before the cache; nothing here is downloaded). They are
specviz's own, made on this project's machines by its own commands; no other weights are committed.

| file | what | bytes | sha256 |
|---|---|---|---|
| `{head.relative_to(head.parents[1])}` | the draft head of `{lm.name}` (EAGLE-style, one layer; float16) | {head.stat().st_size:,} | `{_sha256(head)[:16]}` |
| `{table.relative_to(table.parents[1])}` | RACER's warm copy-logit table (top-16 per token; probabilities in float16) | {table.stat().st_size:,} | `{_sha256(table)[:16]}` |

## How they were made

- Head: `python -m specviz train-head` (defaults: seed {config.get('seed')}, {config.get('epochs')} epochs,
  {config.get('unroll')} training-time-test steps, draft vocabulary {report.get('draft_vocab')} tokens, MLP width
  {config.get('intermediate')}) on {training.get('date', '?')} with torch {training.get('torch', '?')} on
  {training.get('threads', '?')} threads, {training.get('machine', processor_name())}: {sum(seconds.values()):.0f} s
  ({', '.join(f'{k} {v:.0f} s' for k, v in seconds.items())}). Its fp32 file, `{head_source.name}`, was copied
  here in float16 by `python -m specviz trained-files --head {head_source.name}`.
- Corpus: {', '.join(f'{n} {k}' for k, n in report.get('conversations', {}).items())} conversations
  ({report.get('train_tokens', 0):,} tokens, {report.get('answer_tokens', 0):,} in answers): the target's own
  answers to the project's prompts, Python's reference documentation and library code, and the target's answers to
  questions it was asked or wrote itself (`specviz/training/head_corpus.py`); {report.get('dropped_by_guard', 0)}
  texts dropped by the guard against the benchmark suites. Nothing from `assets/suite.jsonl` or
  `assets/heldout.jsonl`.
- Table: `trained-files` reads the first {copy_logit_seed.SEED_TOKENS} tokens of `assets/datastore_corpus.jsonl`
  with the target ({table_s:.0f} s) and keeps each token's last top-16 row.

## What the head accepts

Held-out tenth of the training conversations, top-1 agreement with the target by depth: {report.get('top1_by_depth')}.

On `assets/heldout.jsonl` (never trained on), drafting along `ar`'s own output, the float16 file as shipped
(`draft-quality --suite assets/heldout.jsonl --drafters head --depth {depths}`), share of positions accepted to
depth d:

| drafter | mean accepted | {' | '.join(f'd{d}' for d in range(1, depths + 1))} |
|---|---|{'---|' * depths}
{chr(10).join(rows)}

Written {time.strftime('%Y-%m-%d %H:%M %Z')} on {processor_name()} ({torch.get_num_threads()} threads).
"""
