"""`dev profile`: the verify forward against its linear layers alone, with the heaviest ops, by tree size."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, model_args, positive, tree_sizes


def register(subparsers) -> None:
    parser = subparsers.add_parser("profile", help="verify forward vs its linear layers alone, with the heaviest "
                                   "ops")
    parser.add_argument("--sizes", default="1,16,64", help="comma-separated tree sizes (tokens)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None, metavar="OUT", help="write the rows here")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.profile_forward import format_profile, profile

    sizes = tree_sizes(args.sizes)
    lm = load_target(args)
    rows = profile(lm, sizes, positive("--context", args.context, lm.max_context - max(sizes) - 1),
                   positive("--repeats", args.repeats, 1000))
    emit(format_profile(lm, rows), {"mode": lm.mode, "linear": lm.linear, "linear_by_size": lm.linear_summary(),
                                    "rows": rows}, args.json)
