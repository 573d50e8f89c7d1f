"""`dev memory`: the size of RACER's automaton after N generated tokens."""

from __future__ import annotations

import json

from specviz.commands.common_args import load_target, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("memory", help="RACER automaton size after N generated tokens")
    parser.add_argument("--suite", default="assets/suite.jsonl")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.automaton_memory import automaton_memory
    from specviz.studies.suite import load_suite
    from specviz.params import parse_assignments

    suite = load_suite(args.suite)
    tokens = positive("--tokens", args.tokens, 100_000)
    lm = load_target(args)
    print(json.dumps(automaton_memory(lm, suite, tokens, parse_assignments(args.param))))
