"""`dev random-model`: a model folder with another model's config and tokenizer and seeded random weights."""

from __future__ import annotations

import os


def register(subparsers) -> None:
    parser = subparsers.add_parser("random-model", help="a model folder with another model's config and tokenizer "
                                   "and seeded random weights (for machines the real weights cannot reach)")
    parser.add_argument("--like", default=None, help="model whose config and tokenizer to copy (default model)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--weights", action="store_true", help="also write the random weights (else config only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.random_model import describe, materialise

    # a folder described before (its config.json there, e.g. carried to the GPU machine) is kept as it is
    # unless --like names a model to describe it from
    described = os.path.isfile(os.path.join(args.out, "config.json")) and args.like is None
    folder = args.out if described else describe(args.like, args.out)
    if args.weights:
        materialise(str(folder), args.seed)
    print(folder)
