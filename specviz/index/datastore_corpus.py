"""Write READER's long-term datastore text: the default model's greedy answers to the project's own
prompts (assets/datastore_prompts.jsonl), one JSON line each, into assets/datastore_corpus.jsonl.

Run once by a developer (`python -m specviz datastore corpus`, a few minutes on a CPU); the result ships
in assets/ so that building the datastore (`python -m specviz datastore build`) only tokenises text.
None of these prompts is in a benchmark suite: the datastore must not hold the answers it is judged on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import torch

from specviz.runtime.loading import LoadedModel
from specviz.runtime.prompts import encode
from specviz.errors import SpecvizError


def generate_corpus(lm: LoadedModel, prompts_path: Path, out_path: Path, max_new_tokens: int = 256,
                    batch_size: int = 16, log: Callable[[str], None] = lambda s: None) -> dict:
    items = [json.loads(line) for line in prompts_path.read_text().splitlines() if line.strip()]
    if not items:
        raise SpecvizError(f"{prompts_path} holds no prompts.")
    tokenizer = lm.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(lm.eos_ids))
    started, written = time.perf_counter(), 0
    with out_path.open("w") as out:
        for start in range(0, len(items), batch_size):
            batch = items[start:start + batch_size]
            encoded = [encode(tokenizer, item["prompt"], lm.max_context) for item in batch]
            width = max(len(ids) for ids in encoded)
            # left padding: every row's answer starts at the same column
            input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded], device=lm.device)
            attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded], device=lm.device)
            with torch.inference_mode():
                generated = lm.model.generate(input_ids=input_ids, attention_mask=attention, do_sample=False,
                                              max_new_tokens=max_new_tokens, pad_token_id=pad)
            for item, row in zip(batch, generated[:, width:].tolist()):
                end = next((i for i, t in enumerate(row) if t in lm.eos_ids), len(row))
                text = tokenizer.decode(row[:end], skip_special_tokens=True)
                out.write(json.dumps({"id": item["id"], "response": text}, ensure_ascii=False) + "\n")
                written += 1
            log(f"{written}/{len(items)} responses, {time.perf_counter() - started:.0f} s")
    return {"responses": written, "seconds": round(time.perf_counter() - started, 1)}
