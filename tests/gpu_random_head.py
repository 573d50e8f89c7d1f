"""Write an untrained draft head for a model (seeded weights), so the GPU checks can run every head code path on
the random-weight twin, whose trained head cannot exist. Its drafts are noise; only the code paths count.

    python tests/gpu_random_head.py --model /tmp/twin --out /tmp/heads   (then SPECVIZ_HEADS=/tmp/heads)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from specviz.runtime.draft_head import (HeadNetwork, HeadRecord, head_path, save_head, target_identity,
                                        target_shape)
from specviz.runtime.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True, help="folder for the head (point SPECVIZ_HEADS at it)")
    parser.add_argument("--draft-vocab", type=int, default=8192)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    lm = load_model(args.model, device="cpu")
    draft_ids = torch.randperm(lm.vocab_size)[:args.draft_vocab]
    network = HeadNetwork(lm, target_shape(lm, args.intermediate, args.draft_vocab), draft_ids)
    record = HeadRecord(target=target_identity(lm), shape=network.shape, training={"untrained": True})
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = save_head(network, record, Path(args.out) / head_path(lm).name)
    print(f"untrained head for {lm.name}: {path}")


if __name__ == "__main__":
    main()
