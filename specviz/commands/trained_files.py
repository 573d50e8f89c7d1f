"""`trained-files`: the default model's draft head and warm table as the repository ships them (assets/trained/)."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, model_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("trained-files", help="copy a trained draft head (float16) and build the warm "
                                   "copy-logit table into assets/trained/, with the card that says how")
    parser.add_argument("--head", required=True, help="the head file `train-head --out` wrote")
    parser.add_argument("--out", default=None, help="folder (default: assets/trained)")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from pathlib import Path

    from specviz.runtime.shipped import TRAINED
    from specviz.deploy.trained_files import write

    lm = load_target(args)
    files = write(lm, Path(args.head), Path(args.out) if args.out else TRAINED)
    text = (f"{files.head} ({files.head_bytes / 2**20:.2f} MB)\n{files.table} ({files.table_bytes / 2**20:.2f} MB)\n"
            f"{files.card}")
    return emit(text, {"head": str(files.head), "table": str(files.table), "card": str(files.card),
                       "head_bytes": files.head_bytes, "table_bytes": files.table_bytes}, None)
