"""`space-bundle`: write what a Hugging Face Space repository needs into a folder (specviz/deploy/space_bundle.py)."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("space-bundle", help="write what a Hugging Face Space repository needs into a "
                                   "folder")
    parser.add_argument("--out", required=True, help="a new or empty folder")
    parser.add_argument("--hardware", default="zerogpu", help="zerogpu (the default: where a free account hosts a "
                        "Gradio Space; Python 3.12.12, torch 2.11.0) or cpu (CPU Basic, a paid plan; Python 3.11, "
                        "torch 2.13.0)")
    parser.add_argument("--torch", default=None, help="the torch release to pin (ZeroGPU: 2.8.0, 2.9.1, 2.10.0 or "
                        "2.11.0)")
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.deploy.space_bundle import write_bundle

    files, notes = write_bundle(args.out, args.hardware, args.torch)
    top = sorted({f.split("/")[0] for f in files})
    print(f"wrote {len(files)} files into {args.out} for {args.hardware}: {', '.join(top)}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
