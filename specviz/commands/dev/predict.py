"""`dev predict`: the planner's predicted speedup over ar against the measured one."""

from __future__ import annotations

from specviz.commands.common_args import draft_model, emit, load_target, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("predict", help="the planner's predicted speedup over ar against the measured "
                                   "one")
    parser.add_argument("--suite", required=True)
    parser.add_argument("--method", default="unified")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the full report here")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from specviz.benches.predicted_speedup import format_table, predicted_against_measured
    from specviz.studies.suite import load_suite
    from specviz.params import parse_assignments

    lm = load_target(args)
    draft = draft_model(args, [args.method], lm)
    report = predicted_against_measured(lm, load_suite(args.suite), args.method,
                                        positive("--max-new-tokens", args.max_new_tokens),
                                        parse_assignments(args.param), draft)
    return emit(format_table(report), report, args.json)
