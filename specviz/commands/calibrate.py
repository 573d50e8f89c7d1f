"""`calibrate`: measure and store the verify cost of 1..128 tree tokens (the planner's cost curve)."""

from __future__ import annotations

from specviz.commands.common_args import load_target, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("calibrate", help="measure the verify cost of 1..128 tree tokens")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the curve as a deployment's cost "
                        "file (engine/deployment_cost.py's format, with this machine's provenance): what "
                        "`static-tree --cost OUT` and the Static tree tab price engines' knobs on")
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
    if args.json:
        write_deployment_file(args.json, lm, cost)
    if cost.busy is None:
        print(f"saved to {costmodel.stored_path(lm)}")
    else:
        print(f"not saved: {cost.busy}; this run used it, and the next one measures again (calibrate again on a "
              "quiet machine)")


def write_deployment_file(path: str, lm, cost) -> None:
    """The curve as a deployment's cost file, named after this machine's processor and the model's mode."""
    import datetime
    import json
    import platform
    from pathlib import Path

    import torch

    from specviz.engine.deployment_cost import of_this_machine
    from specviz.runtime.linear_paths import processor_name

    device = torch.cuda.get_device_name(lm.device) if lm.device.type == "cuda" else processor_name()
    found = of_this_machine(cost, None, date=datetime.date.today().isoformat(), torch=torch.__version__,
                            python=platform.python_version(), command="python -m specviz calibrate --json",
                            backend=lm.forward_backend(), threads=torch.get_num_threads(), context=cost.context_len)
    data = {**found.to_dict(), "name": f"{device}-{lm.mode}".replace(" ", "-").lower(), "device": device,
            "dtype": lm.mode}
    Path(path).write_text(json.dumps(data, indent=1))
    print(f"cost file written to {path}")
