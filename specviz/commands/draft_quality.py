"""`draft-quality`: drafters' acceptance by depth and ms per draft level, drafting greedy chains along ar's output."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_model, load_target, model_args, positive
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("draft-quality", help="a draft model's acceptance by depth and ms per draft level, "
                                   "drafting greedy chains along ar's own output")
    parser.add_argument("--suite", default="assets/suite.jsonl")
    parser.add_argument("--drafters", default="self,self-skip:8,head",
                        help="comma-separated: self (the target's own weights), self-skip:K, head (the trained draft "
                             "head), or a model id/folder")
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--json", default=None, metavar="OUT", help="write the report here")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.benches.draft_quality import format_report, measure_draft_quality
    from specviz.studies.suite import load_suite
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.draft_model_spec import resolve_draft

    lm = load_target(args)
    # 'self' (resolved to None: the target's own weights) is measured as the target itself
    drafters = {label: resolve_draft(lm, label, lambda name: load_model(args, name)) or lm
                for label in [d.strip() for d in args.drafters.split(",") if d.strip()]}
    if not drafters:
        raise SpecvizError("--drafters names no drafter.")
    for label, drafter in drafters.items():
        if isinstance(drafter, MissingHead):
            raise SpecvizError(f"--drafters {label}: {drafter.reason}")
    report = measure_draft_quality(lm, drafters, load_suite(args.suite), positive("--depth", args.depth, 32),
                     positive("--max-new-tokens", args.max_new_tokens))
    emit(format_report(report), report, args.json)
