"""Command line: generate, bench, sweep, overhead, predict, memory, calibrate, params, ... (see README)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from specviz.errors import SpecvizError


def _model_args(parser: argparse.ArgumentParser, graphs_both: bool = False) -> None:
    """The model's flags; graphs_both: --graphs may also be `both` (the command runs each regime in turn)."""
    parser.add_argument("--model", default=None, help="hub id or local folder (default: packaged SmolLM2-135M-Instruct)")
    parser.add_argument("--draft-model", default=None, help="draft model of the model source (respec, reader, unified, "
                        "rapid) and of hf-assisted: head (the trained draft head, `train-head`), self (the target's "
                        "own weights), self-skip:K, eagle:PATH (a published EAGLE-1/2 or EAGLE-3 head: folder or hub "
                        "id), or a model id / folder of the target's vocabulary (default: the "
                        "head when one is trained for the target, else self)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when present)")
    parser.add_argument("--dtype", default=None, help="float32, float16, bfloat16 (default: fp32 on CPU)")
    parser.add_argument("--mode", default=None, help="run mode: a precision (fp32, bf16, fp16) and/or compile, "
                        "joined by '+', e.g. bf16+compile (default: fp32 eager on CPU; SPECVIZ_MODE sets it)")
    parser.add_argument("--linear", default=None, help="linear-layer kernel: native (default on CPU in fp32), onednn "
                        "(default in bf16) or stock (PyTorch's F.linear); SPECVIZ_LINEAR sets the default")
    parser.add_argument("--graphs", default=None, choices=("auto", "on", "off", "static") + (("both",) if graphs_both else ()),
                        help="verify forwards as CUDA graphs over a static KV cache: on, off, auto (on with CUDA; "
                        "SPECVIZ_GRAPHS sets it), static (the static cache uncaptured: the CPU's stand-in)"
                        + ("; both: each regime in turn, in one process" if graphs_both else ""))


def _load_target(args):
    """The target model the command runs on; a kernel asked for that cannot run here is said on stderr."""
    from specviz.runtime.loading import load_model

    graphs = getattr(args, "graphs", None)
    lm = load_model(args.model, args.device, args.dtype, args.linear, args.mode,
                    "on" if graphs == "both" else graphs)
    for note in lm.notes:
        print(f"note: {note}", file=sys.stderr)
    return lm


def _sampling_args(parser) -> None:
    """Temperature (0: greedy), top-p and seed; checked by SamplingSettings.checked (values stay text here
    so that a bad one gets its own message)."""
    parser.add_argument("--temperature", default="0", help="0 = greedy; > 0 samples (lossless speculative sampling)")
    parser.add_argument("--top-p", default="1", help="nucleus sampling mass in (0, 1]")
    parser.add_argument("--seed", default="0", help="whole number; the same seed repeats a sampled run")


def _sampling(args):
    from specviz.accept.sampling import SamplingSettings

    return SamplingSettings.checked(args.temperature, args.top_p, args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="generate from one prompt with one method")
    gen.add_argument("--method", required=True)
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt")
    source.add_argument("--prompt-file")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--budget", default="auto", help="draft nodes per step, or auto")
    _sampling_args(gen)
    gen.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    gen.add_argument("--trace", default=None, help="write the step-by-step trace as JSON here")
    gen.add_argument("--json", action="store_true", help="print one JSON object")
    _model_args(gen)

    bench = commands.add_parser("bench", help="benchmark methods on a suite, interleaved per prompt")
    bench.add_argument("--suite", required=True)
    bench.add_argument("--methods", required=True, help="comma-separated, e.g. ar,pld,hf-pld")
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--budget", default="auto")
    bench.add_argument("--repeats", type=int, default=1, help="runs per method and prompt (median time)")
    bench.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    bench.add_argument("--json", default=None, metavar="OUT", help="write the full report here")
    bench.add_argument("--skip-category", default="", help="comma-separated suite categories to leave out")
    _sampling_args(bench)
    _model_args(bench, graphs_both=True)

    load = commands.add_parser("app-load", help="the app under load (concurrent visitors) and over time (memory)")
    load.add_argument("--part", choices=["concurrency", "memory", "replay", "startup"], default="concurrency")
    load.add_argument("--trace", default=None, help="--part replay: the trace to replay")
    load.add_argument("--suite", default="assets/heldout.jsonl")
    load.add_argument("--visitors", type=int, default=8)
    load.add_argument("--method", default="racer")
    load.add_argument("--max-new-tokens", type=int, default=32)
    load.add_argument("--concurrency", type=int, default=2, help="the app's model-event concurrency")
    load.add_argument("--steps", type=int, default=5000)
    load.add_argument("--sessions", type=int, default=200)
    load.add_argument("--ttl", type=int, default=1800, help="the app's session time to live, seconds")
    load.add_argument("--json", default=None, metavar="OUT")
    _model_args(load)
    record = commands.add_parser("record-traces", help="record the shipped traces (assets/traces), one per method")
    record.add_argument("--out", default="assets/traces")
    record.add_argument("--max-new-tokens", type=int, default=96)
    _model_args(record)
    sweep = commands.add_parser("sweep", help="one method over a grid of one or two parameters (or budget, "
                                "temperature, top_p, seed), vs ar's output and speed")
    sweep.add_argument("--method", default="respec")
    sweep.add_argument("--vary", required=True, action="append", metavar="NAME=V1,V2,...",
                       help="one axis, e.g. tau=0,1,2 or budget=8,16,auto; give it twice for a 2-D grid")
    sweep_source = sweep.add_mutually_exclusive_group(required=True)
    sweep_source.add_argument("--suite", help="JSONL suite of prompts")
    sweep_source.add_argument("--prompt", help="one prompt text")
    sweep.add_argument("--category", default=None, help="with --suite: only these categories (comma-separated)")
    sweep.add_argument("--max-new-tokens", type=int, default=64)
    sweep.add_argument("--budget", default="auto")
    sweep.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    _sampling_args(sweep)
    sweep.add_argument("--csv", default=None, metavar="OUT", help="write one line per grid point here")
    sweep.add_argument("--json", default=None, metavar="OUT", help="write the full report here")
    _model_args(sweep)

    over = commands.add_parser("overhead", help="median per-step time outside the forward pass")
    over.add_argument("--suite", required=True)
    over.add_argument("--method", required=True)
    over.add_argument("--budgets", default="16,32,64", help="comma-separated fixed budgets")
    over.add_argument("--max-new-tokens", type=int, default=48)
    over.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    _model_args(over, graphs_both=True)

    pred = commands.add_parser("predict", help="the planner's predicted speedup over ar against the measured one")
    pred.add_argument("--suite", required=True)
    pred.add_argument("--method", default="unified")
    pred.add_argument("--max-new-tokens", type=int, default=64)
    pred.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    pred.add_argument("--json", default=None, metavar="OUT", help="write the full report here")
    _model_args(pred)

    mem = commands.add_parser("memory", help="RACER automaton size after N generated tokens")
    mem.add_argument("--suite", default="assets/suite.jsonl")
    mem.add_argument("--tokens", type=int, default=5000)
    mem.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    _model_args(mem)

    cal = commands.add_parser("calibrate", help="measure the verify cost of 1..128 tree tokens")
    cal.add_argument("--repeats", type=int, default=5)
    cal.add_argument("--context", type=int, default=512)
    _model_args(cal)

    store = commands.add_parser("datastore", help="READER's long-term datastore: build it, or measure it")
    store.add_argument("action", choices=("build", "info", "corpus"),
                       help="build: tokenise assets/datastore_corpus.jsonl into the cache; info: size, load time, "
                            "memory, lookup latency; corpus: regenerate the corpus text with the model (slow)")
    _model_args(store)

    prof = commands.add_parser("profile", help="verify forward vs its linear layers alone, with the heaviest ops")
    prof.add_argument("--sizes", default="1,16,64", help="comma-separated tree sizes (tokens)")
    prof.add_argument("--context", type=int, default=512)
    prof.add_argument("--repeats", type=int, default=7)
    prof.add_argument("--json", default=None, metavar="OUT", help="write the rows here")
    _model_args(prof)

    rand = commands.add_parser("random-model", help="a model folder with another model's config and tokenizer "
                               "and seeded random weights (for machines the real weights cannot reach)")
    rand.add_argument("--like", default=None, help="model whose config and tokenizer to copy (default model)")
    rand.add_argument("--out", required=True)
    rand.add_argument("--weights", action="store_true", help="also write the random weights (else config only)")
    rand.add_argument("--seed", type=int, default=0)

    head = commands.add_parser("train-head", help="train the draft head for the target on this machine (cached per "
                               "model; about 15 minutes on 2 CPU cores)")
    head.add_argument("--out", default=None, help="write the head here (default: the target's cache file)")
    head.add_argument("--epochs", type=int, default=None)
    head.add_argument("--draft-vocab", type=int, default=None, help="tokens the head drafts over (frequency-ranked)")
    head.add_argument("--intermediate", type=int, default=None, help="the head layer's MLP width")
    head.add_argument("--unroll", type=int, default=None, help="training-time-test steps (depths trained)")
    head.add_argument("--generate", type=int, default=None, help="sampled answers of the target per project prompt")
    head.add_argument("--docs-chars", type=int, default=None, help="characters of Python's reference documentation")
    head.add_argument("--code-chars", type=int, default=None, help="characters of Python library code")
    head.add_argument("--seed", type=int, default=None)
    head.add_argument("--json", default=None, metavar="OUT", help="write the training report here")
    _model_args(head)

    quality = commands.add_parser("draft-quality", help="a draft model's acceptance by depth and ms per draft level, "
                                  "drafting greedy chains along ar's own output")
    quality.add_argument("--suite", default="assets/suite.jsonl")
    quality.add_argument("--drafters", default="self,self-skip:8,head",
                         help="comma-separated: self (the target's own weights), self-skip:K, head (the trained draft "
                              "head), or a model id/folder")
    quality.add_argument("--depth", type=int, default=6)
    quality.add_argument("--max-new-tokens", type=int, default=32)
    quality.add_argument("--json", default=None, metavar="OUT", help="write the report here")
    _model_args(quality)

    static = commands.add_parser("static-tree", help="the static draft tree a drafter's measured acceptance by rank "
                                 "justifies, in a serving engine's format")
    static.add_argument("--drafter", default="head", help="head, self, self-skip:K, eagle:PATH or a model id/folder")
    static.add_argument("--suite", default="assets/suite.jsonl", help="where acceptance by rank is measured")
    static.add_argument("--check", default=None, metavar="SUITE", help="also run the drafter with the static trees of "
                        "--check-tokens in greedy sessions on this suite (e.g. assets/heldout.jsonl): measured "
                        "against predicted accepted tokens, and lossless against ar")
    static.add_argument("--check-tokens", default="4,16,64", help="comma-separated tree sizes for --check")
    static.add_argument("--skip-category", default="long-context", help="comma-separated suite categories to leave out")
    static.add_argument("--tokens", default="best", help="draft tokens N (1..256), or best: the N of the largest "
                        "expected speedup on this machine's cost curve")
    static.add_argument("--format", default="vllm", help="vllm, sglang, trtllm, medusa, json or graphml")
    static.add_argument("--depth", type=int, default=6, help="deepest level measured")
    static.add_argument("--max-rank", type=int, default=8, help="ranks measured at each level")
    static.add_argument("--max-new-tokens", type=int, default=64)
    static.add_argument("--json", default=None, metavar="OUT", help="write the whole report here: every path's count "
                        "and chance, the expected curves, the checks and the vLLM tree of each checked N")
    _model_args(static)

    longc = commands.add_parser("long-context", help="RAPID on the long documents: ar vs rapid by context length "
                                "and retrieval budget (grid), eta vs exact match (eta), retrieval quality and cost")
    longc.add_argument("part", choices=("grid", "eta", "retrieval"))
    longc.add_argument("--suite", default="assets/suite.jsonl", help="its long-context items are used")
    longc.add_argument("--repeats", type=int, default=3, help="grid: interleaved runs per item (median)")
    longc.add_argument("--seeds", type=int, default=2, help="eta: sampled runs per item and eta")
    longc.add_argument("--budgets", default="512,1024", help="retrieval budgets (tokens), comma-separated")
    longc.add_argument("--etas", default="0,5,10,20")
    longc.add_argument("--gamma", type=int, default=10)
    longc.add_argument("--max-new-tokens", type=int, default=48)
    longc.add_argument("--temperature", default=None, help="grid: 0 (default); eta: 0.8 (default)")
    longc.add_argument("--json", default=None, metavar="OUT", help="write the rows here")
    _model_args(longc)

    cost = commands.add_parser("state-cost", help="bytes and ms of carrying a session's state through a ZeroGPU call")
    cost.add_argument("--contexts", default="500,4000", help="context lengths in tokens, comma-separated")
    cost.add_argument("--method", default="unified")
    cost.add_argument("--repeats", type=int, default=5)

    commands.add_parser("space-figures", help="the figures behind public mode's limits (memory, speed, trace size)")

    bundle = commands.add_parser("space-bundle", help="write what a Hugging Face Space repository needs into a folder")
    bundle.add_argument("--out", required=True, help="a new or empty folder")
    bundle.add_argument("--hardware", default="zerogpu", help="zerogpu (the default: where a free account hosts a "
                        "Gradio Space; Python 3.12.12, torch 2.11.0) or cpu (CPU Basic, a paid plan; Python 3.11, "
                        "torch 2.13.0)")
    bundle.add_argument("--torch", default=None, help="the torch release to pin (ZeroGPU: 2.8.0, 2.9.1, 2.10.0 or "
                        "2.11.0)")

    par = commands.add_parser("params", help="list a method's parameters with defaults and ranges")
    par.add_argument("method")
    return parser


def _positive(name: str, value: int, high: int = 100_000) -> int:
    if not 1 <= value <= high:
        raise SpecvizError(f"{name} must be between 1 and {high}, got {value}.")
    return value


def _whole(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise SpecvizError(f"{name} must be a whole number, got {text!r}.") from None


def _draft_model(args, methods: list[str], lm):
    """The draft model --draft-model names (runtime.shared.resolve_draft), loaded as the target was;
    hf-assisted needs a model of its own: the default model when none is named."""
    from specviz.runtime.draft_head import HEAD_SPEC, MissingHead
    from specviz.runtime.layer_skip import parse_self_skip
    from specviz.runtime.shared import SELF_DRAFT, model_key, resolve_draft

    spec = (args.draft_model or "").strip()
    if "hf-assisted" in methods:
        if spec in (SELF_DRAFT, HEAD_SPEC) or parse_self_skip(spec) is not None:
            raise SpecvizError("hf-assisted needs a draft model of its own, not self, self-skip or the head.")
        spec = spec or model_key(None)
    draft = resolve_draft(lm, spec, lambda name: _load_model(args, name))
    if isinstance(draft, MissingHead):
        print(f"note: the copy-logit tree drafts in the head's place: {draft.reason}", file=sys.stderr)
    return draft


def _load_model(args, name: str | None):
    """A model loaded with the command's device, dtype, linear kernel and mode."""
    from specviz.runtime.loading import load_model

    return load_model(name, args.device, args.dtype, args.linear, args.mode)


def cmd_generate(args) -> dict:
    from specviz.engine.run import run_method
    from specviz.params import parse_assignments
    from specviz.runtime.prompts import read_prompt_file

    _positive("--max-new-tokens", args.max_new_tokens)
    sampling = _sampling(args)
    prompt = read_prompt_file(args.prompt_file) if args.prompt_file else args.prompt
    params = parse_assignments(args.param)
    lm = _load_target(args)
    run = run_method(lm, args.method, prompt, params=params, budget=args.budget, sampling=sampling,
                     max_new_tokens=args.max_new_tokens, draft=_draft_model(args, [args.method], lm),
                     trace=bool(args.trace))
    if run.trace is not None:  # a peer's run has none
        run.trace.save(args.trace)
    return {"method": args.method, "output_ids": run.output_ids, "text": run.text, **run.figures()}


def _emit(table: str, report: dict, json_path: str | None) -> dict:
    """Print a report's table; write the full report as JSON where asked."""
    print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
    return report


def cmd_bench(args) -> dict:
    from specviz.benches.suite_bench import format_table, run_bench
    from specviz.engine.suite import load_suite
    from specviz.params import parse_assignments

    _positive("--max-new-tokens", args.max_new_tokens)
    _positive("--repeats", args.repeats, 50)
    sampling = _sampling(args)
    skipped = {c.strip() for c in args.skip_category.split(",") if c.strip()}
    suite = [item for item in load_suite(args.suite) if item["category"] not in skipped]
    if not suite:
        raise SpecvizError(f"Every prompt of {args.suite} is in a skipped category.")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    params = parse_assignments(args.param)
    lm = _load_target(args)
    draft = _draft_model(args, methods, lm)
    regimes = _graph_regimes(args, lm)
    report = run_bench(lm, suite, methods, args.max_new_tokens, params, args.budget, args.repeats, draft,
                       log=lambda line: print(line, file=sys.stderr, flush=True), sampling=sampling,
                       regimes=regimes)
    if regimes:
        return _emit("\n\n".join(f"graphs {regime}:\n{format_table(report['regimes'][regime])}" for regime in regimes),
                     report, args.json)
    return _emit(format_table(report), report, args.json)


def _graph_regimes(args, lm) -> list[str] | None:
    """--graphs both: the regimes a command runs in turn (None: the one the model was loaded with)."""
    if getattr(args, "graphs", None) != "both":
        return None
    if not lm.graphs:
        raise SpecvizError("--graphs both compares CUDA graphs with the eager forward: it needs a CUDA device "
                           f"and the lean forward ({'; '.join(lm.notes) or 'this model has neither'}).")
    return ["on", "off"]


def cmd_sweep(args) -> dict:
    from specviz.engine.suite import load_suite
    from specviz.engine.sweep_grid import format_grid, grid_csv, grid_points, parse_axes, run_grid
    from specviz.params import parse_assignments

    axes = parse_axes(args.vary)  # the grid's size is refused here, before anything is read or loaded
    max_new_tokens = _positive("--max-new-tokens", args.max_new_tokens)
    sampling = _sampling(args)
    params = parse_assignments(args.param)
    if args.prompt is not None:
        if args.category:
            raise SpecvizError("--category filters a --suite; it does not apply to --prompt.")
        prompts = [{"id": "prompt", "category": "prompt", "prompt": args.prompt}]
    else:
        prompts = load_suite(args.suite)
        if args.category:
            wanted = [c.strip() for c in args.category.split(",") if c.strip()]
            present = list(dict.fromkeys(item["category"] for item in prompts))
            unknown = [c for c in wanted if c not in present]
            if unknown or not wanted:
                raise SpecvizError(f"{args.suite} has no category {', '.join(map(repr, unknown)) or repr('')}; "
                                   f"it has: {', '.join(present)}.")
            prompts = [item for item in prompts if item["category"] in wanted]
    grid_points(args.method, axes, params, args.budget, sampling, prompts=len(prompts))  # every value, no model yet
    lm = _load_target(args)
    report = run_grid(lm, prompts, args.method, axes, max_new_tokens, params, args.budget,
                      _draft_model(args, [args.method], lm), sampling,
                      progress=lambda done, total, label: print(f"[{done}/{total}] {label}", file=sys.stderr,
                                                                flush=True))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(grid_csv(report))
    return _emit(format_grid(report), report, args.json)


def cmd_overhead(args) -> None:
    from specviz.benches.overhead import step_overhead
    from specviz.engine.suite import load_suite
    from specviz.methods import parse_budget
    from specviz.params import parse_assignments

    suite = load_suite(args.suite)
    budgets = [parse_budget(b.strip()) for b in args.budgets.split(",") if b.strip()]
    lm = _load_target(args)
    from specviz.runtime import captured_forward

    regimes = _graph_regimes(args, lm) or [None]
    for budget in budgets:
        for regime in regimes:  # each budget in both regimes back to back, so drift moves them alike
            if regime is not None:
                captured_forward.install(lm, regime)
            figures = step_overhead(lm, suite, args.method, budget, _positive("--max-new-tokens", args.max_new_tokens),
                                    parse_assignments(args.param))
            print(json.dumps({"graphs": "on" if lm.graphs else "off", **figures}), flush=True)


def cmd_predict(args) -> dict:
    from specviz.engine.suite import load_suite
    from specviz.params import parse_assignments
    from specviz.benches.predicted_speedup import format_table, predicted_against_measured

    lm = _load_target(args)
    draft = _draft_model(args, [args.method], lm)
    report = predicted_against_measured(lm, load_suite(args.suite), args.method,
                                        _positive("--max-new-tokens", args.max_new_tokens),
                                        parse_assignments(args.param), draft)
    return _emit(format_table(report), report, args.json)


def cmd_memory(args) -> None:
    from specviz.benches.automaton_memory import automaton_memory
    from specviz.engine.suite import load_suite
    from specviz.params import parse_assignments

    suite = load_suite(args.suite)
    tokens = _positive("--tokens", args.tokens, 100_000)
    lm = _load_target(args)
    print(json.dumps(automaton_memory(lm, suite, tokens, parse_assignments(args.param))))


def cmd_calibrate(args) -> None:
    from specviz.engine import costmodel

    lm = _load_target(args)
    cost = costmodel.calibrate(lm, context_len=_positive("--context", args.context, lm.max_context - 200),
                               repeats=_positive("--repeats", args.repeats, 100))
    print(cost.table())
    print(f"linear kernel by tree size: {lm.linear_summary()}")
    if cost.busy is None:
        print(f"saved to {costmodel.stored_path(lm)}")
    else:
        print(f"not saved: {cost.busy} in each of {costmodel.CALIBRATION_ATTEMPTS} attempts (something else was "
              f"running?); calibrate again on a quiet machine")


def cmd_datastore(args) -> None:
    from specviz.index import datastore

    lm = _load_target(args)
    if args.action == "build":
        print(json.dumps(datastore.build(lm)))
    elif args.action == "info":
        print(json.dumps(datastore.measure(lm)))
    else:
        from specviz.index.datastore_corpus import generate_corpus

        print(json.dumps(generate_corpus(lm, datastore.ASSETS / "datastore_prompts.jsonl", datastore.CORPUS,
                                         log=lambda line: print(line, file=sys.stderr, flush=True))))


def cmd_profile(args) -> None:
    from specviz.benches.profile_forward import format_profile, profile

    lm = _load_target(args)
    try:
        sizes = [_positive("--sizes", int(x), 1024) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        raise SpecvizError(f"--sizes takes whole numbers separated by commas, got {args.sizes!r}.") from None
    if not sizes:
        raise SpecvizError("--sizes names no size.")
    rows = profile(lm, sizes, _positive("--context", args.context, lm.max_context - max(sizes) - 1),
                   _positive("--repeats", args.repeats, 1000))
    _emit(format_profile(lm, rows), {"mode": lm.mode, "linear": lm.linear, "linear_by_size": lm.linear_summary(),
                                     "rows": rows}, args.json)


def cmd_random_model(args) -> None:
    from specviz.benches.random_model import describe, materialise

    described = os.path.isfile(os.path.join(args.out, "config.json")) and args.like is None
    folder = args.out if described else describe(args.like, args.out)
    if args.weights:
        materialise(str(folder), args.seed)
    print(folder)


def cmd_train_head(args) -> dict:
    from dataclasses import asdict, replace
    from pathlib import Path

    from specviz.training.train_head import TrainConfig, train

    chosen = {"epochs": args.epochs, "draft_vocab": args.draft_vocab, "intermediate": args.intermediate,
              "unroll": args.unroll, "generate_per_prompt": args.generate, "docs_chars": args.docs_chars,
              "code_chars": args.code_chars, "seed": args.seed}
    for name in ("epochs", "draft_vocab", "intermediate", "unroll"):
        if chosen[name] is not None:
            _positive(f"--{name.replace('_', '-')}", chosen[name], 1_000_000)
    config = replace(TrainConfig(), **{k: v for k, v in chosen.items() if v is not None})
    lm = _load_target(args)
    report = train(lm, config, out=Path(args.out) if args.out else None,
                   log=lambda line: print(line, file=sys.stderr, flush=True))
    table = (f"draft head for {lm.name}: {report.path}\n"
             f"  {report.head_weights / 1e6:.2f} M trained weights, draft vocabulary {report.draft_vocab} tokens "
             f"({100 * report.draft_vocab_coverage:.1f}% of the answers' tokens)\n"
             f"  text: {report.conversations} ({report.train_tokens} tokens, {report.answer_tokens} in answers; "
             f"{report.dropped_by_guard} dropped by the suite guard)\n"
             f"  {report.steps} steps, final loss {report.final_loss}; held-out top-1 agreement by depth "
             f"{report.top1_by_depth}\n"
             f"  seconds per phase: {report.seconds} (total {sum(report.seconds.values()):.0f} s)")
    return _emit(table, asdict(report), args.json)


def cmd_draft_quality(args) -> None:
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.shared import resolve_draft
    from specviz.benches.draft_quality import format_report, measure
    from specviz.engine.suite import load_suite

    lm = _load_target(args)
    # 'self' (resolved to None: the target's own weights) is measured as the target itself
    drafters = {label: resolve_draft(lm, label, lambda name: _load_model(args, name)) or lm
                for label in [d.strip() for d in args.drafters.split(",") if d.strip()]}
    if not drafters:
        raise SpecvizError("--drafters names no drafter.")
    for label, drafter in drafters.items():
        if isinstance(drafter, MissingHead):
            raise SpecvizError(f"--drafters {label}: {drafter.reason}")
    report = measure(lm, drafters, load_suite(args.suite), _positive("--depth", args.depth, 32),
                     _positive("--max-new-tokens", args.max_new_tokens))
    _emit(format_report(report), report, args.json)


def cmd_static_tree(args) -> None:
    from dataclasses import asdict

    from specviz.engine.static_check import check_tree
    from specviz.engine.static_study import study_static_trees
    from specviz.engine.suite import load_suite
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.shared import resolve_draft
    from specviz.tree.static_tree import best_tree
    from specviz.tree.static_tree_export import FORMATS, export

    if args.format not in FORMATS:  # refused before anything is measured
        raise SpecvizError(f"Unknown format {args.format!r}: choose one of {', '.join(FORMATS)}.")
    tokens = None if args.tokens.strip().lower() == "best" else _positive("--tokens", _whole("--tokens", args.tokens), 256)
    depth, max_rank = _positive("--depth", args.depth, 16), _positive("--max-rank", args.max_rank, 64)
    skipped = {c.strip() for c in args.skip_category.split(",") if c.strip()}
    suite = [item for item in load_suite(args.suite) if item["category"] not in skipped]
    if not suite:
        raise SpecvizError(f"Every prompt of {args.suite} is in a skipped category.")
    check_suite = [item for item in load_suite(args.check) if item["category"] not in skipped] if args.check else []
    check_tokens = [_positive("--check-tokens", _whole("--check-tokens", n), 256)
                    for n in args.check_tokens.split(",") if n.strip()]
    lm = _load_target(args)
    drafter = resolve_draft(lm, args.drafter, lambda name: _load_model(args, name)) or lm
    if isinstance(drafter, MissingHead):
        raise SpecvizError(f"--drafter {args.drafter}: {drafter.reason}")
    found = study_static_trees(lm, drafter, args.drafter, suite, depth, max_rank,
                               _positive("--max-new-tokens", args.max_new_tokens))
    acceptance, curve, speedups, best = found.acceptance, found.expected_accepted, found.expected_speedup, found.best_tokens
    supported = acceptance.supported()
    tree = best_tree(acceptance, tokens or best)
    print(f"{args.drafter}: {acceptance.positions} positions of {found.prompts} prompts, one drafter level "
          f"{found.level_ms:.2f} ms; chance by rank path (count, 95% interval):", file=sys.stderr)
    for path, count, chance, (low, high) in acceptance.level_table(2):
        print(f"  {path}: {chance:.3f} ({count}, {low:.3f}-{high:.3f})", file=sys.stderr)
    for n in sorted({1, 2, 4, 8, 16, 32, 64, best, tree.size} & set(range(1, len(curve) + 1))):
        print(f"  N = {n:>3}: expected accepted {curve[n - 1]:.3f}, expected speedup {speedups[n - 1]:.2f}x"
              + (" (best here)" if n == best else ""), file=sys.stderr)
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
    method = found.engine_method
    if args.json:
        report = {"drafter": args.drafter, "suite": args.suite, "positions": acceptance.positions,
                  "level_ms": found.level_ms, "best_tokens": best,
                  "paths": [{"path": list(p), "count": c, "chance": round(ch, 5), "interval": [round(lo, 5), round(hi, 5)]}
                            for p, c, ch, (lo, hi) in acceptance.level_table(depth)],
                  "expected_accepted": [round(e, 4) for e in curve], "expected_speedup": [round(s, 4) for s in speedups],
                  "checks": [{**asdict(c), "vllm": json.loads(export(best_tree(acceptance, c.tokens), "vllm", method))}
                             for c in checks]}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(export(tree, args.format, method, {"drafter": args.drafter, "positions": acceptance.positions,
                                            "expected_speedup": round(speedups[tree.size - 1], 3),
                                            "best_tokens_here": best}))


def cmd_params(args) -> None:
    from specviz.methods import get_method

    method = get_method(args.method)
    print(f"{method.name}: {method.summary}")
    print("  budget        default auto   range 1..256 or auto (draft nodes per step)")
    for p in method.params:
        allowed = "|".join(p.choices) if p.choices else f"{p.low}..{p.high}"
        print(f"  {p.name:<17} default {p.default!s:<6} range {allowed}  {p.help}")


def cmd_long_context(args) -> dict:
    from pathlib import Path

    from specviz.accept.sampling import SamplingSettings
    from specviz.benches import long_context
    from specviz.engine.suite import load_suite

    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    suite = load_suite(args.suite)
    items = long_context.long_items(suite)
    if args.part != "retrieval" and not items:
        raise SpecvizError(f"{args.suite} has no long-context items.")
    lm = _load_target(args)
    draft = _draft_model(args, ["rapid"], lm)
    if args.part == "grid":   # one question per document: the context length is what varies
        items = list({item["document"]: item for item in reversed(items)}.values())[::-1]
        temperature = SamplingSettings.checked(args.temperature or 0).temperature
        rows = long_context.run_grid(lm, items, budgets, _positive("--repeats", args.repeats, 50),
                                     args.max_new_tokens, temperature, args.gamma, draft, log)
        report, table = {"rows": rows}, long_context.format_grid(rows)
    elif args.part == "eta":
        temperature = SamplingSettings.checked(args.temperature or 0.8).temperature
        etas = [float(e) for e in args.etas.split(",") if e.strip()]
        rows = long_context.run_eta(lm, items, etas, args.seeds, temperature, args.max_new_tokens, args.gamma,
                                    budgets[-1], draft, log)
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
    return _emit(table, report, args.json)


def cmd_record_traces(args) -> dict:
    from pathlib import Path

    from specviz.benches.record_traces import record_traces

    lm = _load_target(args)
    paths = record_traces(lm, Path(args.out), _positive("--max-new-tokens", args.max_new_tokens),
                          log=lambda line: print(line, file=sys.stderr, flush=True))
    return _emit("\n".join(str(p) for p in paths), {"traces": [str(p) for p in paths]}, None)


def cmd_app_load(args) -> dict:
    import statistics

    from specviz.benches import app_load
    from specviz.engine.suite import load_suite

    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    env = {"SPECVIZ_MODEL_CONCURRENCY": str(args.concurrency), "SPECVIZ_SESSION_TTL": str(args.ttl)}
    if args.part == "replay":
        from pathlib import Path

        if not args.trace:
            raise SpecvizError("--part replay needs --trace FILE (e.g. one written by generate --trace).")
        report = app_load.time_replay(Path(args.trace))
        return _emit(", ".join(f"{k} {v}" for k, v in report.items()), report, args.json)
    if args.part == "startup":  # SPECVIZ_CACHE (a new folder: a cold start), CXX, ... come from the environment
        report = app_load.measure_startup(env)
        return _emit(", ".join(f"{k} {v}" for k, v in report.items()), report, args.json)
    if args.part == "concurrency":
        items = [i for i in load_suite(args.suite) if i["category"] != "long-context"][:args.visitors]
        prompts = [i["prompt"] if "prompt" in i else i["messages"][-1]["content"] for i in items]
        expected = app_load.greedy_texts(_load_target(args), prompts, args.max_new_tokens)
        server = app_load.Server(env)
        try:
            rows = app_load.run_concurrency(server.url, prompts, expected, args.method, args.max_new_tokens)
        finally:
            server.close()
        waits = [r["waited_s"] for r in rows]
        table = "\n".join(f"visitor {n}: latency {r['latency_s']} s, own compute {r['compute_s']} s, waited "
                          f"{r['waited_s']} s, {r['tokens']} tokens, same as greedy {r['same_as_greedy']}, "
                          f"identical to its ar run {r['identical_to_ar']}" for n, r in enumerate(rows, 1))
        table += (f"\nmodel concurrency {args.concurrency}: all answered {len(rows)}/{len(prompts)}, waited median "
                  f"{statistics.median(waits):.2f} s, max {max(waits):.2f} s, last answer at "
                  f"{max(r['latency_s'] for r in rows):.2f} s")
        return _emit(table, {"concurrency": args.concurrency, "rows": rows}, args.json)
    server = app_load.Server(env)
    try:
        report = app_load.run_memory(server, args.steps, args.sessions, ttl_s=args.ttl, log=log)
    finally:
        server.close()
    table = (f"RSS at start {report['start_mb']} MB; stepping: " + ", ".join(f"{n} steps {mb} MB" for n, mb in report["steps"])
             + "; abandoned sessions: " + ", ".join(f"{n} {mb} MB" for n, mb in report["sessions"])
             + f"; once their connections were noticed closed {report['after_mb']} MB")
    return _emit(table, report, args.json)


def cmd_state_cost(args) -> None:
    from specviz.runtime.shared import shared_model
    from specviz.benches.state_cost import measure

    rows = measure(shared_model(None), [int(c) for c in args.contexts.split(",")], args.method, args.repeats)
    for row in rows:
        print(f"{row['method']} at {row['context_tokens']} tokens of context: {row['bytes'] / 2**20:.1f} MB, "
              f"pickled in {row['dump_ms']} ms, read back in {row['load_ms']} ms")


def cmd_space_figures(args) -> None:
    from specviz.runtime.shared import shared_model
    from specviz.benches.space_figures import measure
    from specviz.benches.memory_budget import memory_budget

    figures = measure()
    figures["memory_budget"] = memory_budget(shared_model(None), figures["model_rss_bytes"],
                                             figures["rss_bytes_per_param"])
    print(json.dumps(figures, indent=1))


def cmd_space_bundle(args) -> None:
    from specviz.deploy.space_bundle import write_bundle

    files, notes = write_bundle(args.out, args.hardware, args.torch)
    top = sorted({f.split("/")[0] for f in files})
    print(f"wrote {len(files)} files into {args.out} for {args.hardware}: {', '.join(top)}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


COMMANDS = {"space-figures": cmd_space_figures, "space-bundle": cmd_space_bundle, "state-cost": cmd_state_cost, "app-load": cmd_app_load, "record-traces": cmd_record_traces, "long-context": cmd_long_context, "bench": cmd_bench, "sweep": cmd_sweep, "overhead": cmd_overhead, "predict": cmd_predict, "memory": cmd_memory,
            "calibrate": cmd_calibrate, "datastore": cmd_datastore, "profile": cmd_profile,
            "random-model": cmd_random_model, "draft-quality": cmd_draft_quality, "static-tree": cmd_static_tree, "params": cmd_params,
            "train-head": cmd_train_head}


def main(argv: list[str] | None = None) -> int:
    from specviz.runtime.threads import follow_cpu_quota

    args = build_parser().parse_args(argv)
    follow_cpu_quota()  # threads from the container's CPU quota, not the host's core count
    try:
        if args.command == "generate":
            result = cmd_generate(args)
            if args.json:
                print(json.dumps(result, ensure_ascii=False))
            else:
                print(result["text"])
                print(f"\n[{result['new_tokens']} tokens in {result['steps']} steps, "
                      f"{result['mean_accepted']:.2f} per step, {result['tokens_per_s']:.1f} tok/s]", file=sys.stderr)
        else:
            COMMANDS[args.command](args)
    except SpecvizError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
