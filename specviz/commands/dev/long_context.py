"""`dev long-context`: RAPID on the long documents: ar against rapid by context length and retrieval budget
(grid), eta against exact match (eta), the retrieval's quality and cost (retrieval)."""

from __future__ import annotations

from specviz.commands.common_args import draft_model, emit, load_target, log_line, model_args, positive
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("long-context", help="RAPID on the long documents: ar vs rapid by context length "
                                   "and retrieval budget (grid), eta vs exact match (eta), retrieval quality and cost")
    parser.add_argument("part", choices=("grid", "eta", "retrieval"))
    parser.add_argument("--suite", default="assets/suite.jsonl", help="its long-context items are used")
    parser.add_argument("--repeats", type=int, default=3, help="grid: interleaved runs per item (median)")
    parser.add_argument("--seeds", type=int, default=2, help="eta: sampled runs per item and eta")
    parser.add_argument("--budgets", default="512,1024", help="retrieval budgets (tokens), comma-separated")
    parser.add_argument("--etas", default="0,5,10,20")
    parser.add_argument("--gamma", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", default=None, help="grid: 0 (default); eta: 0.8 (default)")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the rows here")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from pathlib import Path

    from specviz.accept.sampling import SamplingSettings
    from specviz.benches import long_context
    from specviz.studies.suite import load_suite

    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    suite = load_suite(args.suite)
    items = long_context.long_items(suite)
    if args.part != "retrieval" and not items:
        raise SpecvizError(f"{args.suite} has no long-context items.")
    lm = load_target(args)
    draft = draft_model(args, ["rapid"], lm)
    if args.part == "grid":   # one question per document: the context length is what varies
        items = list({item.document: item for item in reversed(items)}.values())[::-1]
        temperature = SamplingSettings.checked(args.temperature or 0).temperature
        rows = long_context.rapid_budget_rows(lm, items, budgets, positive("--repeats", args.repeats, 50),
                                              args.max_new_tokens, temperature, args.gamma, draft, log_line)
        report, table = {"rows": rows}, long_context.format_budget_rows(rows)
    elif args.part == "eta":
        temperature = SamplingSettings.checked(args.temperature or 0.8).temperature
        etas = [float(e) for e in args.etas.split(",") if e.strip()]
        rows = long_context.run_eta(lm, items, etas, args.seeds, temperature, args.max_new_tokens, args.gamma,
                                    budgets[-1], draft, log_line)
        report = {"rows": rows}
        table = "\n".join(f"eta {r['eta']:>5g}: exact match {100 * r['exact_match']:.0f}% of {r['runs']} runs, "
                          f"acceptance {100 * (r['acceptance_rate'] or 0):.0f}%, MAT {r['mat']:.2f}" for r in rows)
    else:
        report = long_context.run_retrieval(lm, Path(args.suite).parent / "documents", budgets=budgets)
        table = (f"{report['embedder']}: load {report['load_s']} s, weights {report['weights_mb']} MB, RSS "
                 f"+{report['rss_growth_mb']} MB after load and a first embedding\n" + "\n".join(
                     f"{k:<12} evidence in chosen chunks {v['evidence_found']}/{v['questions']}, none above "
                     f"threshold {v['none_above_threshold']}, median {v['median_ms']} ms per question"
                     for k, v in report["rankers"].items()))
    return emit(table, report, args.json)
