"""`calibrate`: measure and store the verify cost of 1..128 tree tokens (the planner's cost curve)."""

from __future__ import annotations

from specviz.commands.common_args import load_target, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("calibrate", help="measure the verify cost of 1..128 tree tokens")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--context", type=int, default=512)
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.engine import costmodel

    lm = load_target(args)
    cost = costmodel.calibrate(lm, context_len=positive("--context", args.context, lm.max_context - 200),
                               repeats=positive("--repeats", args.repeats, 100))
    print(cost.table())
    print(f"linear kernel by tree size: {lm.linear_summary()}")
    if cost.busy is None:
        print(f"saved to {costmodel.stored_path(lm)}")
    else:
        print(f"not saved: {cost.busy} in each of {costmodel.CALIBRATION_ATTEMPTS} attempts (something else was "
              f"running?); calibrate again on a quiet machine")
