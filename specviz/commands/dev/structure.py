"""`dev structure`: the code's packages, their import layers and circles, and the packages one Step passes."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser("structure", help="modules per package, import layers and circles, and the "
                                   "packages one Step of the page passes (loads the default model)")
    parser.add_argument("--no-step", action="store_true", help="the imports only (no model)")
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.app_structure import measure_structure, step_route

    for line in measure_structure().lines():
        print(line)
    if not args.no_step:
        for line in step_route().lines():
            print(line)
