"""`trained-files`: the default model's draft head and warm table as the repository ships them (assets/trained/)."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, model_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("trained-files", help="copy a trained draft head (float16) and build the warm "
                                   "copy-logit table into assets/trained/, with the card that says how; or copy the "
                                   "EAGLE-3 head (--eagle3-head)")
    parser.add_argument("--head", default=None, help="the head file `train-head --out` wrote")
    parser.add_argument("--eagle3-head", default=None, metavar="FOLDER", help="the folder `train-head --shape eagle3` "
                        "wrote: copied in float16 without its lm_head (the target's own rows), with its card section")
    parser.add_argument("--out", default=None, help="folder (default: assets/trained)")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from pathlib import Path

    from specviz.errors import SpecvizError
    from specviz.runtime.shipped import TRAINED
    from specviz.deploy.trained_files import write, write_eagle3

    if not (args.head or args.eagle3_head):
        raise SpecvizError("Name what to ship: --head FILE (the draft head and the warm table) or --eagle3-head "
                           "FOLDER (the EAGLE-3 head).")
    lm = load_target(args)
    out = Path(args.out) if args.out else TRAINED
    lines, record = [], {}
    if args.head:
        files = write(lm, Path(args.head), out)
        lines += [f"{files.head} ({files.head_bytes / 2**20:.2f} MB)",
                  f"{files.table} ({files.table_bytes / 2**20:.2f} MB)"]
        record.update(head=str(files.head), table=str(files.table), card=str(files.card), head_bytes=files.head_bytes,
                      table_bytes=files.table_bytes)
    if args.eagle3_head:
        eagle3 = write_eagle3(lm, Path(args.eagle3_head), out)
        lines.append(f"{eagle3.folder} (model.safetensors {eagle3.weights_bytes:,} bytes)")
        record.update(eagle3_head=str(eagle3.folder), eagle3_bytes=eagle3.weights_bytes, card=str(eagle3.card))
    return emit("\n".join(lines + [record["card"]]), record, None)
