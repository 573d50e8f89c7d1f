"""`dev page-faults`: minor page faults per step of a full 64-node tree (does the heap policy reuse freed
memory?), one JSON line."""

from __future__ import annotations

import json
from dataclasses import asdict

from specviz.commands.common_args import load_target, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("page-faults", help="minor page faults per step of a 64-node tree (heap policy)")
    parser.add_argument("--steps", type=int, default=20)
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.step_page_faults import step_page_faults

    figures = step_page_faults(load_target(args), positive("--steps", args.steps, 1000))
    print(json.dumps({**asdict(figures), "median_after_warm_up": figures.median_after_warm_up}), flush=True)
