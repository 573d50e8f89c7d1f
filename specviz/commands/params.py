"""`params`: a method's parameters with their defaults and ranges (the names --param and the app's sliders take)."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser("params", help="list a method's parameters with defaults and ranges")
    parser.add_argument("method")
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.methods import get_method

    method = get_method(args.method)
    print(f"{method.name}: {method.summary}")
    print("  budget        default auto   range 1..256 or auto (draft nodes per step)")
    for p in method.params:
        allowed = "|".join(p.choices) if p.choices else f"{p.low}..{p.high}"
        print(f"  {p.name:<17} default {p.default!s:<6} range {allowed}  {p.help}")
