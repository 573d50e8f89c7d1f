"""`dev record-traces`: record the shipped traces (assets/traces), one per method."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, log_line, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("record-traces", help="record the shipped traces (assets/traces), one per method")
    parser.add_argument("--out", default="assets/traces")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--methods", default="", help="comma-separated: record these methods' traces alone, leaving "
                                                      "the others' files as they are (default: every method)")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from pathlib import Path

    from specviz.benches.record_traces import record_traces

    lm = load_target(args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] or None
    paths = record_traces(lm, Path(args.out), positive("--max-new-tokens", args.max_new_tokens), log=log_line,
                          methods=methods)
    return emit("\n".join(str(p) for p in paths), {"traces": [str(p) for p in paths]}, None)
