"""`static-tree`: the static draft tree a drafter's measured acceptance by rank justifies, printed in a serving
engine's format; the table of chances, the expected curves and the checks go to stderr."""

from __future__ import annotations

import json
import sys

from specviz.commands.common_args import load_model, load_target, model_args, positive, whole
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("static-tree", help="the static draft tree a drafter's measured acceptance by "
                                   "rank justifies, in a serving engine's format")
    parser.add_argument("--drafter", default="head", help="head, head-eagle3, self, self-skip:K, eagle:PATH or a model "
                        "id/folder")
    parser.add_argument("--suite", default="assets/suite.jsonl", help="where acceptance by rank is measured")
    parser.add_argument("--check", default=None, metavar="SUITE", help="also run the drafter with the static trees "
                        "of --check-tokens in greedy sessions on this suite (e.g. assets/heldout.jsonl): measured "
                        "against predicted accepted tokens, and lossless against ar")
    parser.add_argument("--check-tokens", default="4,16,64", help="comma-separated tree sizes for --check")
    parser.add_argument("--skip-category", default="long-context", help="comma-separated suite categories to leave "
                        "out")
    parser.add_argument("--tokens", default="best", help="draft tokens N (1..256), or best: the N of the largest "
                        "expected speedup on the --cost curve")
    parser.add_argument("--format", default="vllm", help="vllm, sglang, trtllm or medusa: that engine's knobs for "
                        "the drafter under its own drafting rule, as its current release takes them; json or graphml: "
                        "the best tree of --tokens itself")
    parser.add_argument("--cost", default="here", help="whose verify cost prices the trees and every engine's "
                        "knobs: here (this machine's curve), llama.cpp (llama.cpp's own here: llama-bench, built once "
                        "into the cache), a curve shipped in assets/costs by name (e.g. h200-specviz-captured-fp32), "
                        "or a cost file (engine/deployment_cost.py's JSON; `calibrate --json` writes one)")
    parser.add_argument("--depth", type=int, default=6, help="deepest level measured")
    parser.add_argument("--max-rank", type=int, default=8, help="ranks measured at each level")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", default=None, metavar="OUT", help="write the whole report here: every path's "
                        "count and chance, the expected curves, the checks and every engine's advice")
    model_args(parser)
    parser.set_defaults(func=run)


def deployment_of(name: str):
    """--cost: None for this machine's curve, else a shipped curve by name or a cost file (SpecvizError otherwise)."""
    from pathlib import Path

    from specviz.engine import deployment_cost

    name = (name or "here").strip()
    if name == "here":
        return None
    if name == "llama.cpp":  # llama.cpp's own verify cost on this machine (llama-bench; built once into the cache)
        import torch

        from specviz.benches.llamacpp import cost_curve
        from specviz.runtime.loading import DEFAULT_MODEL, gguf_file, resolve_model_source

        gguf = gguf_file(None, resolve_model_source(None))
        return cost_curve(gguf, DEFAULT_MODEL, torch.get_num_threads(), log=lambda line: print(line, file=sys.stderr))
    shipped = deployment_cost.shipped()
    if name in shipped:
        return shipped[name]
    if Path(name).is_file():
        return deployment_cost.load(name)
    raise SpecvizError(f"--cost {name!r} is neither here, a shipped curve ({', '.join(shipped) or 'none'}) nor a file.")


def run(args) -> None:
    from specviz.studies.static_study import refused_before_loading, study_static_trees
    from specviz.studies.suite import load_suite
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.draft_model_spec import resolve_draft
    from specviz.tree.static_tree import best_tree
    from specviz.tree.static_tree_export import ENGINE_FORMATS, FORMATS, export

    # every flag is checked and every suite read before the model loads
    if args.format not in FORMATS:
        raise SpecvizError(f"Unknown format {args.format!r}: choose one of {', '.join(FORMATS)}.")
    best = args.tokens.strip().lower() == "best"
    tokens = None if best else positive("--tokens", whole("--tokens", args.tokens), 256)
    depth, max_rank = positive("--depth", args.depth, 16), positive("--max-rank", args.max_rank, 64)
    skipped = {c.strip() for c in args.skip_category.split(",") if c.strip()}
    suite = [item for item in load_suite(args.suite) if item.category not in skipped]
    if not suite:
        raise SpecvizError(f"Every prompt of {args.suite} is in a skipped category.")
    check_suite = [item for item in load_suite(args.check) if item.category not in skipped] if args.check else []
    check_tokens = [positive("--check-tokens", whole("--check-tokens", n), 256)
                    for n in args.check_tokens.split(",") if n.strip()]
    if args.format in ENGINE_FORMATS:
        why = refused_before_loading(args.drafter, ENGINE_FORMATS[args.format])
        if why:
            raise SpecvizError(f"{ENGINE_FORMATS[args.format]}: {why}")
    deployment = deployment_of(args.cost)
    lm = load_target(args)
    drafter = resolve_draft(lm, args.drafter, lambda name: load_model(args, name)) or lm
    if isinstance(drafter, MissingHead):
        raise SpecvizError(f"--drafter {args.drafter}: {drafter.reason}")
    found = study_static_trees(lm, drafter, args.drafter, suite, depth, max_rank,
                               positive("--max-new-tokens", args.max_new_tokens), deployment=deployment)
    tree = best_tree(found.acceptance, tokens or found.best_tokens)
    print_study(args.drafter, found, tree.size)
    checks = run_checks(args, lm, drafter, found.acceptance, check_suite, check_tokens)
    engine_checks = run_engine_checks(args, lm, drafter, found, check_suite)
    if args.json:
        write_report(args, found, depth, checks, engine_checks)
    if args.format in ENGINE_FORMATS:
        print(engine_text(found.engine_advice(ENGINE_FORMATS[args.format])))
        return
    print(export(tree, args.format, {"drafter": args.drafter, "positions": found.acceptance.positions,
                                     "expected_speedup": round(found.expected_speedup[tree.size - 1], 3),
                                     "best_tokens_here": found.best_tokens}))


def engine_text(advice) -> str:
    """The config to copy (stdout); on stderr the knobs, the predicted figures, the rules' source and notes. A
    refused engine is a SpecvizError that says why and what to use instead."""
    if advice.refused:
        raise SpecvizError(f"{advice.engine}: {advice.refused}")
    knobs = ", ".join(f"{name} {value}" for name, value in advice.knobs)
    print(f"{advice.engine}: {knobs}; predicted accepted drafts a step {advice.predicted_accepted:.3f} under its own "
          f"drafting rule, {advice.verified_tokens} tokens verified, predicted speedup {advice.predicted_speedup:.2f}x "
          f"on the cost curve of {advice.priced_on}; rules read from {advice.rules.where}", file=sys.stderr)
    for note in advice.notes:
        print(f"  note: {note}", file=sys.stderr)
    for problem in advice.problems:
        print(f"  the engine would refuse it: {problem}", file=sys.stderr)
    return advice.config_text


def print_study(drafter: str, found, tree_size: int) -> None:
    """On stderr: the chance of each rank path of the first two levels, and the expected curves at a few N."""
    acceptance, best = found.acceptance, found.best_tokens
    curve, speedups = found.expected_accepted, found.expected_speedup
    print(f"{drafter}: {acceptance.positions} positions of {found.prompts} prompts, one drafter level "
          f"{found.level_ms:.2f} ms; chance by rank path (count, 95% interval):", file=sys.stderr)
    for path, count, chance, (low, high) in acceptance.level_table(2):
        print(f"  {path}: {chance:.3f} ({count}, {low:.3f}-{high:.3f})", file=sys.stderr)
    for n in sorted({1, 2, 4, 8, 16, 32, 64, best, tree_size} & set(range(1, len(curve) + 1))):
        print(f"  N = {n:>3}: expected accepted {curve[n - 1]:.3f}, expected speedup {speedups[n - 1]:.2f}x"
              + (" (best here)" if n == best else ""), file=sys.stderr)


def run_checks(args, lm, drafter, acceptance, check_suite: list[dict], check_tokens: list[int]) -> list:
    """--check: greedy sessions with the tree of each size the measurements support, said on stderr."""
    from specviz.studies.static_check import check_tree
    from specviz.tree.static_tree import best_tree

    supported = acceptance.supported()
    checks = []
    for n in check_tokens if check_suite else ():
        if n > len(supported):
            print(f"  check N = {n}: more than the {len(supported)} tokens the measurements support", file=sys.stderr)
            continue
        checked = check_tree(lm, None if drafter is lm else drafter, best_tree(acceptance, n), check_suite,
                             args.max_new_tokens)
        checks.append(checked)
        print(f"  check N = {n:>3} on {args.check}: accepted a step predicted {checked.predicted_accepted:.3f}, "
              f"measured {checked.measured_accepted:.3f} over {checked.steps} steps, lossless "
              f"{'yes' if checked.lossless else 'NO'}", file=sys.stderr)
    return checks


def run_engine_checks(args, lm, drafter, found, check_suite: list) -> dict:
    """--check: each engine's advice drafted in greedy sessions (its chain or tree, or its dynamic EAGLE rule with
    the head's own scores), the accepted drafts a step measured against what its rule predicted, said on stderr."""
    from specviz.studies.static_check import check_engine

    measured, by_shape = {}, {}
    advice = found.engines.get("llama.cpp")
    if check_suite and advice is not None and not advice.refused:
        checked = check_llamacpp(args, lm, advice, check_suite)
        if checked is not None:
            measured["llama.cpp"] = checked
    for engine, advice in found.engines.items() if check_suite else ():
        if engine == "llama.cpp":
            continue
        if advice.shape not in by_shape:  # two engines that draft the same (SGLang, TensorRT-LLM) share one run
            by_shape[advice.shape] = check_engine(lm, None if drafter is lm else drafter, advice, check_suite,
                                                  args.max_new_tokens)
        checked = by_shape[advice.shape]
        if checked is None:
            continue
        measured[engine] = checked
        knobs = ", ".join(f"{name} {value}" for name, value in advice.knobs)
        print(f"  check {engine} ({knobs}) on {args.check}: accepted a step predicted {checked.predicted_accepted:.3f} "
              f"under its rule, measured {checked.measured_accepted:.3f} over {checked.steps} steps, lossless "
              f"{'yes' if checked.lossless else 'NO'}", file=sys.stderr)
    return measured


def write_report(args, found, depth: int, checks: list, engine_checks: dict) -> None:
    """--json: every path's count and chance, the expected curves, each check, and every engine's advice."""
    from dataclasses import asdict

    acceptance = found.acceptance
    report = {"drafter": args.drafter, "suite": args.suite, "positions": acceptance.positions,
              "level_ms": found.level_ms, "best_tokens": found.best_tokens,
              "priced_on": found.deployment.to_dict(),
              "paths": [{"path": list(p), "count": c, "chance": round(ch, 5), "interval": [round(lo, 5), round(hi, 5)]}
                        for p, c, ch, (lo, hi) in acceptance.level_table(depth)],
              "expected_accepted": [round(e, 4) for e in found.expected_accepted],
              "expected_speedup": [round(s, 4) for s in found.expected_speedup],
              "checks": [asdict(c) for c in checks],
              "engines": {engine: {**asdict(advice),
                                   "check": asdict(engine_checks[engine]) if engine in engine_checks else None}
                          for engine, advice in found.engines.items()}}
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)


def check_llamacpp(args, lm, advice, check_suite: list):
    """--check for llama.cpp: its own llama-server with the advised flags against it without them, on the check
    suite's prompts (built once into the cache), said on stderr."""
    import torch

    from specviz.benches.llamacpp import check_flags, is_built
    from specviz.runtime.loading import gguf_file, resolve_model_source
    from specviz.runtime.prompts import encode

    gguf = gguf_file(args.model, resolve_model_source(args.model))
    if gguf is None:
        print("  check llama.cpp: left out (it runs the GGUF file the model was loaded from, and this model has none)",
              file=sys.stderr)
        return None
    if not is_built() and args.cost != "llama.cpp":
        print("  check llama.cpp: left out (llama.cpp is not built here; `--cost llama.cpp` or `bench --peer "
              "llama.cpp` builds it once, about 10 minutes on 2 cores)", file=sys.stderr)
        return None
    prompts = [encode(lm.tokenizer, item.messages, lm.max_context) for item in check_suite]
    checked = check_flags(tuple(advice.config_text.split()), prompts, args.max_new_tokens, gguf, lm.tokenizer,
                          torch.get_num_threads(), log=lambda line: print(line, file=sys.stderr))
    print(f"  check llama.cpp ({checked.flags}) on {args.check}: accepted a step predicted "
          f"{checked.predicted_accepted:.3f} under its rule (along its own greedy tokens), measured "
          f"{checked.measured_accepted:.3f} over {checked.steps} steps; speedup over its plain decoding "
          f"{checked.speedup_end_to_end:.2f}x end to end, {checked.speedup_generation:.2f}x generation only; "
          f"{checked.same_tokens}/{checked.prompts} prompts the same tokens as without the flags", file=sys.stderr)
    return checked
