"""`dev roofline`: this machine's memory bandwidth and FMA peak, and each verify forward against its bound."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, model_args, positive, tree_sizes
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("roofline", help="memory bandwidth and FMA peak of this machine, and the verify "
                                   "forward at each tree size against its bound")
    parser.add_argument("--sizes", default="1,2,4,8,16,32,64", help="comma-separated tree sizes (tokens)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", default=None, metavar="OUT", help="write the report here")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.roofline import format_report, measure_report

    sizes = tree_sizes(args.sizes)
    lm = load_target(args)
    if lm.device.type != "cpu":
        raise SpecvizError("dev roofline measures a CPU's bandwidth and FMA peak; the model is on "
                           f"{lm.device.type} (pass --device cpu).")
    try:
        report = measure_report(lm, sizes, positive("--context", args.context, lm.max_context - max(sizes) - 1),
                                positive("--repeats", args.repeats, 1000))
    except RuntimeError as error:
        raise SpecvizError(str(error)) from None
    emit(format_report(lm, report), report.to_json(), args.json)
