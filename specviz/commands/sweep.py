"""`sweep`: one method over a grid of one or two parameters, against ar's output and speed."""

from __future__ import annotations

import sys

from specviz.commands.common_args import (draft_model, emit, load_target, model_args, positive, sampling,
                                          sampling_args)
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("sweep", help="one method over a grid of one or two parameters (or budget, "
                                   "temperature, top_p, seed), vs ar's output and speed")
    parser.add_argument("--method", default="respec")
    parser.add_argument("--vary", required=True, action="append", metavar="NAME=V1,V2,...",
                        help="one axis, e.g. tau=0,1,2 or budget=8,16,auto; give it twice for a 2-D grid")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--suite", help="JSONL suite of prompts")
    source.add_argument("--prompt", help="one prompt text")
    parser.add_argument("--category", default=None, help="with --suite: only these categories (comma-separated)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--budget", default="auto")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    sampling_args(parser)
    parser.add_argument("--csv", default=None, metavar="OUT", help="write one line per grid point here")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the full report here")
    model_args(parser)
    parser.set_defaults(func=run)


def sweep_prompts(args) -> list:
    """The one --prompt, or the --suite's items of the --category asked for (every category when none):
    studies.suite.SuiteItem each."""
    from specviz.studies.suite import SuiteItem, categories, load_suite

    if args.prompt is not None:
        if args.category:
            raise SpecvizError("--category filters a --suite; it does not apply to --prompt.")
        return [SuiteItem.of(args.prompt)]
    prompts = load_suite(args.suite)
    if not args.category:
        return prompts
    wanted = [c.strip() for c in args.category.split(",") if c.strip()]
    present = categories(prompts)
    unknown = [c for c in wanted if c not in present]
    if unknown or not wanted:
        raise SpecvizError(f"{args.suite} has no category {', '.join(map(repr, unknown)) or repr('')}; "
                           f"it has: {', '.join(present)}.")
    return [item for item in prompts if item.category in wanted]


def run(args) -> dict:
    from specviz.studies.sweep_grid import format_grid, grid_csv, grid_points, last_report, parse_axes, run_grid
    from specviz.params import parse_assignments

    axes = parse_axes(args.vary)  # the grid's size is refused here, before anything is read or loaded
    max_new_tokens = positive("--max-new-tokens", args.max_new_tokens)
    settings = sampling(args)
    params = parse_assignments(args.param)
    prompts = sweep_prompts(args)
    grid_points(args.method, axes, params, args.budget, settings, prompts=len(prompts))  # every value, no model yet
    lm = load_target(args)
    events = run_grid(lm, prompts, args.method, axes, max_new_tokens, params, args.budget,
                      draft_model(args, [args.method], lm), settings)
    report = last_report(events, lambda event: print(f"[{event.done}/{event.total}] {event.label}", file=sys.stderr,
                                                      flush=True))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(grid_csv(report))
    return emit(format_grid(report), report.to_dict(), args.json)
