"""The default model's draft head and warm copy-logit table as the repository ships them (assets/trained/, read by
runtime.shipped): half precision, each at most MAX_BYTES, beside CARD.md, which says how they were made and what
the head accepts on the held-out prompts. Written by `python -m specviz trained-files` from a head `train-head`
made on this machine; the table is built here from the datastore corpus (drafters.copy_logit_seed).

`trained-files --eagle3-head FOLDER` ships the EAGLE-3 head the same way (write_eagle3): the folder
`train-head --shape eagle3` wrote, copied in float16 without its lm_head (the target's own output rows of the draft
vocabulary, frozen in training: runtime.trained_eagle3 rebuilds them), with a section of its own in CARD.md."""

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

MAX_BYTES = 10_000_000   # per file the repository ships
HELDOUT = Path(__file__).resolve().parents[2] / "assets" / "heldout.jsonl"
CARD = "CARD.md"
EAGLE3_SECTION = "## The EAGLE-3 head"   # CARD.md's section for it, kept when the rest is written again
# `train-head` options as TrainConfig names them (a card writes the command that made a head)
TRAIN_FLAGS = {"epochs": "--epochs", "draft_vocab": "--draft-vocab", "intermediate": "--intermediate",
               "unroll": "--unroll", "generate_per_prompt": "--generate", "docs_chars": "--docs-chars",
               "code_chars": "--code-chars", "seed": "--seed"}


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
        _check_size(path)
    shipped = load_head(lm, head)  # what a clone reads: its acceptance is the one the card gives
    quality = measure_draft_quality(lm, {"head": shipped}, load_suite(HELDOUT), quality_depth, quality_tokens)
    card = out / CARD
    kept = _eagle3_section(card.read_text()) if card.is_file() else ""
    card.write_text(card_text(lm, source.record, head, table, table_s, quality, head_source) + kept)
    return TrainedFiles(head, table, card, head.stat().st_size, table.stat().st_size)


def _check_size(path: Path) -> None:
    if path.stat().st_size > MAX_BYTES:
        raise SpecvizError(f"'{path}' holds {path.stat().st_size:,} bytes, over the {MAX_BYTES:,} a file the "
                           "repository ships may hold: train a smaller head (--draft-vocab, --intermediate).")


def _eagle3_section(card: str) -> str:
    """CARD.md's EAGLE-3 section with the blank line before it, '' where it has none."""
    at = card.find(EAGLE3_SECTION)
    return "" if at < 0 else "\n" + card[at:]


@dataclass(frozen=True)
class Eagle3Files:
    """What trained-files wrote for the EAGLE-3 head: its folder, its weights file's size, the card."""
    folder: Path
    weights_bytes: int
    card: Path


def write_eagle3(lm: LoadedModel, source: Path, out: Path = TRAINED, quality_depth: int = 4,
                 quality_tokens: int = 32) -> Eagle3Files:
    """Copy the EAGLE-3 head folder `source` (train-head --shape eagle3's, checked against lm) into
    out/heads/<slug>.eagle3 in float16 without its lm_head, measure the copy's acceptance by depth on
    assets/heldout.jsonl as a clone loads it, and write (or replace) CARD.md's EAGLE-3 section."""
    from specviz.benches.draft_quality import measure_draft_quality
    from specviz.runtime.eagle_head import load_eagle
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC, checked_eagle3_folder, eagle3_folder_name, \
        read_eagle3_record
    from specviz.studies.suite import load_suite

    source = checked_eagle3_folder(lm, Path(source))
    record = read_eagle3_record(source)
    folder = shipped_eagle3_copy(lm, source, out / HEADS / eagle3_folder_name(lm.name))
    _check_size(folder / "model.safetensors")
    shipped = load_eagle(lm, str(checked_eagle3_folder(lm, folder)), name=EAGLE3_SPEC)  # what a clone reads
    quality = measure_draft_quality(lm, {EAGLE3_SPEC: shipped}, load_suite(HELDOUT), quality_depth, quality_tokens)
    card = out / CARD
    text = card.read_text() if card.is_file() else "# The default model's trained files\n"
    at = text.find(EAGLE3_SECTION)
    main = (text if at < 0 else text[:at]).rstrip("\n") + "\n\n"
    card.write_text(main + eagle3_card_text(lm, record, folder, quality, source))
    return Eagle3Files(folder, (folder / "model.safetensors").stat().st_size, card)


def shipped_eagle3_copy(lm: LoadedModel, source: Path, folder: Path) -> Path:
    """The EAGLE-3 head folder source (checked against lm) written to folder as the repository ships it: float16,
    without its lm_head, which must be lm's own output rows of the draft vocabulary (as training keeps them)."""
    from safetensors.torch import load_file

    from specviz.runtime.eagle_files import target_rows
    from specviz.runtime.trained_eagle3 import checked_eagle3_folder, read_eagle3_record, write_eagle3_folder

    source = checked_eagle3_folder(lm, Path(source))
    record = read_eagle3_record(source)
    weights = load_file(str(source / "model.safetensors"))
    d2t, _ = weights.pop("d2t"), weights.pop("t2d", None)
    draft_ids = torch.arange(len(d2t)) + d2t.long()
    lm_head = weights.pop("lm_head.weight", None)
    rows = target_rows(lm.model.get_output_embeddings().weight, draft_ids, record.shape.hidden, str(source))
    if lm_head is None or not torch.equal(lm_head.float(), rows):
        raise SpecvizError(f"The lm_head of '{source}' is not {lm.name}'s own output rows of its draft vocabulary: "
                           "only a head that kept them frozen ships without them.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    return write_eagle3_folder(lm, weights, draft_ids, record, folder, torch.float16)


def train_command(config: dict) -> str:
    """The `train-head --shape eagle3` command that trains with this TrainConfig (its options that differ from
    the defaults; the shape's own unroll left out)."""
    from specviz.training.train_head import EAGLE3_UNROLL, TrainConfig

    defaults = {**TrainConfig().__dict__, "unroll": EAGLE3_UNROLL}
    flags = [f"{flag} {config[name]}" for name, flag in TRAIN_FLAGS.items()
             if name in config and config[name] != defaults[name]]
    command = " ".join(["python -m specviz train-head --shape eagle3", *flags])
    others = [f"{name}={value!r}" for name, value in config.items()   # set from Python: no option for them
              if name not in TRAIN_FLAGS and name != "head_shape" and value != defaults.get(name, value)]
    return command + (f" with TrainConfig({', '.join(others)})" if others else "")


def _quality_rows(quality: dict) -> tuple[int, str]:
    rows = [f"| {label} | {r['mean_accepted']:.2f} | "
            + " | ".join(f"{x:.3f}" for x in r["accepted_to_depth"]) + " |" for label, r in quality.items()]
    return len(next(iter(quality.values()))["accepted_to_depth"]), "\n".join(rows)


def eagle3_card_text(lm: LoadedModel, record, folder: Path, quality: dict, source: Path) -> str:
    training = record.training
    report, config = training.get("report", {}), training.get("config", {})
    seconds = report.get("seconds", {})
    weights, settings = folder / "model.safetensors", folder / "config.json"
    depths, rows = _quality_rows(quality)
    return f"""{EAGLE3_SECTION}

`heads/{folder.name}/` is the default model's EAGLE-3 head (`--draft-model head-eagle3`; `python -m specviz
export-head` writes it for vLLM, SGLang and TensorRT-LLM), in EAGLE-3's folder layout, float16. Its lm_head is
left out: it is `{lm.name}`'s own output-embedding rows of the draft vocabulary (frozen in training), which the
loader and `export-head` take from the target through `d2t` (`specviz/runtime/trained_eagle3.py`).

| file | what | bytes | sha256 |
|---|---|---|---|
| `heads/{folder.name}/{weights.name}` | fc, midlayer.*, norm (float16), d2t, t2d; specviz's record | {weights.stat().st_size:,} | `{_sha256(weights)[:16]}` |
| `heads/{folder.name}/{settings.name}` | its Llama config (EAGLE-3's fields) | {settings.stat().st_size:,} | `{_sha256(settings)[:16]}` |

- Made by `{train_command(config)}` (seed {config.get('seed')}, {config.get('epochs')} epochs,
  {config.get('unroll')} training-time-test steps with the gradient through them, draft vocabulary
  {report.get('draft_vocab')} tokens, MLP width {config.get('intermediate')}, {report.get('head_weights', 0):,}
  trained weights) on {training.get('date', '?')} with torch {training.get('torch', '?')} on
  {training.get('threads', '?')} threads, {training.get('machine', processor_name())}: {sum(seconds.values()):.0f} s
  ({', '.join(f'{k} {v:.0f} s' for k, v in seconds.items())}). Its float32 folder, `{source.name}`, was copied
  here by `python -m specviz trained-files --eagle3-head {source.name}`.
- Corpus: {', '.join(f'{n} {k}' for k, n in report.get('conversations', {}).items())} conversations
  ({report.get('train_tokens', 0):,} tokens, {report.get('answer_tokens', 0):,} in answers), the head's own
  (`specviz/training/head_corpus.py`); {report.get('dropped_by_guard', 0)} texts dropped by the suite guard.
- Held-out tenth of the training conversations, top-1 agreement with the target by training-time-test step:
  {report.get('top1_by_depth')}.

On `assets/heldout.jsonl`, the float16 folder as shipped (`draft-quality --suite assets/heldout.jsonl --drafters
head-eagle3 --depth {depths}`), share of positions accepted to depth d:

| drafter | mean accepted | {' | '.join(f'd{d}' for d in range(1, depths + 1))} |
|---|---|{'---|' * depths}
{rows}

Written {time.strftime('%Y-%m-%d %H:%M %Z')} on {processor_name()} ({torch.get_num_threads()} threads).
"""


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
