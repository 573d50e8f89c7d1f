"""`dev state-cost`: the bytes and milliseconds of carrying a session's state through a ZeroGPU call."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser("state-cost", help="bytes and ms of carrying a session's state through a ZeroGPU "
                                   "call")
    parser.add_argument("--contexts", default="500,4000", help="context lengths in tokens, comma-separated")
    parser.add_argument("--method", default="unified")
    parser.add_argument("--repeats", type=int, default=5)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.state_cost import measure_state_cost
    from specviz.runtime.shared_resources import shared_model

    rows = measure_state_cost(shared_model(None), [int(c) for c in args.contexts.split(",")], args.method, args.repeats)
    for row in rows:
        print(row.line())
