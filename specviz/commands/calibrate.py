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
    load = cost.machine_load
    print(f"the machine meanwhile: other processes used {load.others_cores:.2f} of {load.cores} cores, load average "
          f"{load.load_before:.2f} before and {load.load_after:.2f} after")
    if cost.busy is None:
        print(f"saved to {costmodel.stored_path(lm)}")
    else:
        print(f"not saved: {cost.busy}; this run used it, and the next one measures again (calibrate again on a "
              "quiet machine)")
