"""`dev overhead`: the median per-step time outside the forward pass, one JSON line per budget and regime."""

from __future__ import annotations

import json

from specviz.commands.common_args import draft_model, graph_regimes, load_target, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("overhead", help="median per-step time outside the forward pass")
    parser.add_argument("--suite", required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument("--budgets", default="16,32,64", help="comma-separated fixed budgets")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    model_args(parser, graphs_both=True)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.overhead import step_overhead
    from specviz.studies.suite import load_suite
    from specviz.tree.budget import parse_budget
    from specviz.params import parse_assignments
    from specviz.runtime import captured_forward

    suite = load_suite(args.suite)
    budgets = [parse_budget(b.strip()) for b in args.budgets.split(",") if b.strip()]
    lm = load_target(args)
    # the drafter the method runs by default elsewhere (bench, the app): the trained head where there is one
    draft = draft_model(args, [args.method], lm)
    regimes = graph_regimes(args, lm) or [None]
    for budget in budgets:
        for regime in regimes:  # each budget in both regimes back to back, so drift moves them alike
            if regime is not None:
                captured_forward.install(lm, regime)
            figures = step_overhead(lm, suite, args.method, budget, positive("--max-new-tokens", args.max_new_tokens),
                                    parse_assignments(args.param), draft)
            print(json.dumps({"graphs": "on" if lm.graphs else "off", **figures}), flush=True)
