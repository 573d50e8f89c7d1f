"""`dev record-traces`: record the shipped traces (assets/traces), one per method."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, log_line, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("record-traces", help="record the shipped traces (assets/traces), one per method")
    parser.add_argument("--out", default="assets/traces")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from pathlib import Path

    from specviz.benches.record_traces import record_traces

    lm = load_target(args)
    paths = record_traces(lm, Path(args.out), positive("--max-new-tokens", args.max_new_tokens), log=log_line)
    return emit("\n".join(str(p) for p in paths), {"traces": [str(p) for p in paths]}, None)
