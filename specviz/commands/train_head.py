"""`train-head`: train the draft head for the target on this machine (cached per model)."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, log_line, model_args, positive


def register(subparsers) -> None:
    parser = subparsers.add_parser("train-head", help="train the draft head for the target on this machine (cached "
                                   "per model; 20 minutes on 2 CPU cores for the default model, whose head ships "
                                   "in assets/trained)")
    parser.add_argument("--shape", default="specviz", choices=("specviz", "eagle3"),
                        help="specviz: the trained head (--draft-model head); eagle3: EAGLE-3's shape, three fused "
                        "target layers and its own vocabulary with d2t, in EAGLE-3's folder layout (--draft-model "
                        "head-eagle3; `export-head --format speculators` writes it for vLLM and SGLang)")
    parser.add_argument("--out", default=None, help="write the head here (default: the target's cache file; for "
                        "--shape eagle3 its cache folder)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--draft-vocab", type=int, default=None, help="tokens the head drafts over (frequency-ranked)")
    parser.add_argument("--intermediate", type=int, default=None, help="the head layer's MLP width")
    parser.add_argument("--unroll", type=int, default=None, help="training-time-test steps (depths trained; default 2, "
                        "3 for --shape eagle3)")
    parser.add_argument("--generate", type=int, default=None, help="sampled answers of the target per project prompt")
    parser.add_argument("--docs-chars", type=int, default=None, help="characters of Python's reference documentation")
    parser.add_argument("--code-chars", type=int, default=None, help="characters of Python library code")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", default=None, metavar="OUT", help="write the training report here")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from dataclasses import asdict, replace
    from pathlib import Path

    from specviz.training.train_head import EAGLE3_UNROLL, TrainConfig, train

    chosen = {"epochs": args.epochs, "draft_vocab": args.draft_vocab, "intermediate": args.intermediate,
              "unroll": args.unroll, "generate_per_prompt": args.generate, "docs_chars": args.docs_chars,
              "code_chars": args.code_chars, "seed": args.seed, "head_shape": args.shape}
    for name in ("epochs", "draft_vocab", "intermediate", "unroll"):
        if chosen[name] is not None:
            positive(f"--{name.replace('_', '-')}", chosen[name], 1_000_000)
    if args.shape == "eagle3" and chosen["unroll"] is None:
        chosen["unroll"] = EAGLE3_UNROLL
    config = replace(TrainConfig(), **{k: v for k, v in chosen.items() if v is not None})
    lm = load_target(args)
    report = train(lm, config, out=Path(args.out) if args.out else None, log=log_line)
    table = (f"{'EAGLE-3-shaped ' if args.shape == 'eagle3' else ''}draft head for {lm.name}: {report.path}\n"
             f"  {report.head_weights / 1e6:.2f} M trained weights, draft vocabulary {report.draft_vocab} tokens "
             f"({100 * report.draft_vocab_coverage:.1f}% of the answers' tokens)\n"
             f"  text: {report.conversations} ({report.train_tokens} tokens, {report.answer_tokens} in answers; "
             f"{report.dropped_by_guard} dropped by the suite guard)\n"
             f"  {report.steps} steps, final loss {report.final_loss}; held-out top-1 agreement by depth "
             f"{report.top1_by_depth}\n"
             f"  seconds per phase: {report.seconds} (total {sum(report.seconds.values()):.0f} s)")
    return emit(table, asdict(report), args.json)
