"""`python -m specviz dev ...`: the maintenance commands that produce the docs' figures (timings, profiles,
memory, the app under load, the shipped traces, the random twin the GPU checks run). DEV_COMMANDS are their
modules, in the order `dev --help` lists them; each registers itself as the user commands do."""

from specviz.commands.dev import (app_load, docs, long_context, memory, mode_diff, overhead, page_faults, predict, profile,
                                  random_model, record_traces, roofline, space_figures, state_cost, structure)

DEV_COMMANDS = (overhead, predict, memory, page_faults, profile, roofline, random_model, long_context, state_cost,
                space_figures, app_load, record_traces, structure, mode_diff, docs)


def register(subparsers) -> None:
    """The `dev` group: a parser of its own whose subcommands are DEV_COMMANDS."""
    group = subparsers.add_parser("dev", help="maintenance commands behind the docs' figures (timings, profiles, "
                                  "memory, load, traces)", description=__doc__)
    commands = group.add_subparsers(dest="dev_command", required=True)
    for module in DEV_COMMANDS:
        module.register(commands)
