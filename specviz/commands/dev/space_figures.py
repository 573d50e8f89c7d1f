"""`dev space-figures`: the figures behind public mode's limits (memory, speed, trace size), as JSON."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("space-figures", help="the figures behind public mode's limits (memory, speed, "
                                   "trace size)")
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.memory_budget import memory_budget
    from specviz.benches.space_figures import measure_space_figures
    from specviz.runtime.shared_resources import shared_model

    figures = measure_space_figures()
    figures["memory_budget"] = memory_budget(shared_model(None), figures["model_rss_bytes"],
                                             figures["rss_bytes_per_param"])
    print(json.dumps(figures, indent=1))
