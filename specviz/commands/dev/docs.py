"""`dev docs`: rewrite the docs' generated blocks (the README's method table, from the method registry)."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser("docs", help="rewrite the docs' generated blocks (the README's method table)")
    parser.add_argument("--check", action="store_true", help="only say which files are stale (exit 1 if any)")
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.doc_blocks import stale_files, write_blocks

    if args.check:
        stale = stale_files()
        print("stale: " + ", ".join(stale) if stale else "up to date")
        if stale:
            raise SystemExit(1)
        return
    changed = write_blocks()
    print("rewrote " + ", ".join(changed) if changed else "up to date")
