"""Command line: generate, bench, sweep, calibrate, params, ... and, under `dev`, the maintenance commands
behind the docs' figures (overhead, predict, memory, profile, ...). See the README; each command is a module
of specviz/commands/."""

from __future__ import annotations

import argparse
import sys

from specviz.commands import COMMANDS, dev
from specviz.errors import SpecvizError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    dev.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command: 0 when it ran, 2 with one line on stderr when it refused (a SpecvizError); argparse
    itself exits 2 on a bad flag and 0 after --help."""
    from specviz.runtime.threads import follow_cpu_quota

    args = build_parser().parse_args(argv)
    follow_cpu_quota()  # threads from the container's CPU quota, not the host's core count
    try:
        args.func(args)
    except SpecvizError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
