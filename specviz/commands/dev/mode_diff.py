"""`dev mode-diff`: a run mode's greedy tokens against another mode's on a suite, each parting classified."""

from __future__ import annotations

from specviz.commands.common_args import emit, log_line, positive
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("mode-diff", help="a run mode's greedy tokens against another mode's (gguf against "
                                   "fp32): where they part, a numeric tie or a real difference")
    parser.add_argument("--suite", default="assets/heldout.jsonl")
    parser.add_argument("--mode", default="gguf")
    parser.add_argument("--against", default="fp32", help="the reference mode")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--skip-category", default="", help="comma-separated suite categories to leave out")
    parser.add_argument("--model", default=None)
    parser.add_argument("--json", default=None, metavar="OUT")
    parser.set_defaults(func=run)


def run(args) -> dict:
    from specviz.benches.mode_diff import mode_differences
    from specviz.studies.suite import load_suite
    from specviz.runtime.shared_resources import shared_model

    skipped = {c.strip() for c in args.skip_category.split(",") if c.strip()}
    suite = [item for item in load_suite(args.suite) if item.category not in skipped]
    if not suite:
        raise SpecvizError(f"Every prompt of {args.suite} is in a skipped category.")
    lm, reference = shared_model(args.model, args.mode), shared_model(args.model, args.against)
    if lm.mode == reference.mode:
        raise SpecvizError(f"Both modes run as {lm.mode} here ({'; '.join(lm.notes) or 'the same mode'}).")
    rows = mode_differences(lm, reference, suite, positive("--max-new-tokens", args.max_new_tokens), log_line)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("yes", "tie", "real")}
    summary = (f"{lm.mode} against {reference.mode} on {len(rows)} prompts: {counts['yes']} identical, "
               f"{counts['tie']} parted at a numeric tie, {counts['real']} parted where a mode's margin was at least "
               "0.5")
    return emit(summary, {"mode": lm.mode, "against": reference.mode, "rows": rows, "counts": counts}, args.json)
