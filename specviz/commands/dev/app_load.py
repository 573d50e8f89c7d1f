"""`dev app-load`: the app under load (concurrent visitors through gradio_client), over time (its memory),
a trace's replay time, and its start-up on the cache the environment names."""

from __future__ import annotations

from specviz.commands.common_args import emit, load_target, log_line, model_args
from specviz.errors import SpecvizError


def register(subparsers) -> None:
    parser = subparsers.add_parser("app-load", help="the app under load (concurrent visitors) and over time "
                                   "(memory)")
    parser.add_argument("--part", choices=["concurrency", "memory", "replay", "startup", "browser", "first-runs",
                                                 "versus-bench"],
                        default="concurrency", help="browser: a Run in headless Chromium against the same Run through "
                        "the API, on one server (--method, --max-new-tokens, --repeats); first-runs: in fresh server "
                        "processes (the page loaded as soon as live steps are ready, then 90 s after start), Run, "
                        "Reset, Run again, each with its counters and the breakdown behind them; versus-bench: per example "
                        "prompt of the page (--examples), its first Run after a page load in headless Chromium and "
                        "bench's reading of it in this process, taken in turns (--repeats rounds)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trace", default=None, help="--part replay: the trace to replay")
    parser.add_argument("--suite", default="assets/heldout.jsonl")
    parser.add_argument("--visitors", type=int, default=8)
    parser.add_argument("--method", default="racer")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=2, help="the app's model-event concurrency")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--ttl", type=int, default=1800, help="the app's session time to live, seconds")
    parser.add_argument("--examples", default=None, help="--part versus-bench: suite ids, comma-separated "
                        "(default: every example of assets/suite.jsonl but the long-context ones)")
    parser.add_argument("--bench-repeats", type=int, default=2, help="--part versus-bench: bench's repeats a reading")
    parser.add_argument("--json", default=None, metavar="OUT")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> dict:
    from specviz.benches import app_load

    # the served app's settings; SPECVIZ_CACHE (a new folder: a cold start), CXX, ... come from the environment
    env = {"SPECVIZ_MODEL_CONCURRENCY": str(args.concurrency), "SPECVIZ_SESSION_TTL": str(args.ttl)}
    if args.part == "replay":
        from pathlib import Path

        if not args.trace:
            raise SpecvizError("--part replay needs --trace FILE (e.g. one written by generate --trace).")
        report = app_load.time_replay(Path(args.trace))
        return emit(", ".join(f"{k} {v}" for k, v in report.items()), report, args.json)
    if args.part == "startup":
        report = app_load.measure_startup(env)
        return emit(", ".join(f"{k} {v}" for k, v in report.items()), report, args.json)
    if args.part == "browser":
        from specviz.benches import browser_run

        report = browser_run.measure(args.method, args.max_new_tokens, args.repeats, env)
        lines = [f"{side}: " + ", ".join(f"{k} {v}" for k, v in figures.items())
                 for side, figures in report["median"].items()]
        return emit("\n".join(lines), report, args.json)
    if args.part == "first-runs":
        from specviz.benches import browser_run

        rows = browser_run.first_runs(args.method, args.max_new_tokens, env=env)
        lines = [f"{r['run']} Run, page loaded {r['after_start_s']} s after start: {int(r.get('tokens', 0))} tokens, "
                 f"{int(r.get('steps', 0))} steps, {r.get('tokens_per_s')} tok/s, speedup vs ar {r.get('speedup')}x\n"
                 f"  {r['breakdown']}" for r in rows]
        return emit("\n".join(lines), {"method": args.method, "rows": rows}, args.json)
    if args.part == "versus-bench":
        return versus_bench(args, env)
    if args.part == "concurrency":
        return concurrency(args, env)
    return memory(args, env)


def concurrency(args, env: dict) -> dict:
    """Visitors at once, each answer compared with greedy decoding and its own ar run."""
    import statistics

    from specviz.benches import app_load
    from specviz.studies.suite import load_suite

    items = [i for i in load_suite(args.suite) if i.category != "long-context"][:args.visitors]
    prompts = [i.text for i in items]
    expected = app_load.greedy_texts(load_target(args), prompts, args.max_new_tokens)
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
    return emit(table, {"concurrency": args.concurrency, "rows": rows}, args.json)


def memory(args, env: dict) -> dict:
    """The server's resident memory while stepping and after abandoned sessions expire."""
    from specviz.benches import app_load

    server = app_load.Server(env)
    try:
        report = app_load.run_memory(server, args.steps, args.sessions, ttl_s=args.ttl, log=log_line)
    finally:
        server.close()
    table = (f"RSS at start {report['start_mb']} MB; stepping: "
             + ", ".join(f"{n} steps {mb} MB" for n, mb in report["steps"])
             + "; abandoned sessions: " + ", ".join(f"{n} {mb} MB" for n, mb in report["sessions"])
             + f"; once their connections were noticed closed {report['after_mb']} MB")
    return emit(table, report, args.json)


def versus_bench(args, env: dict) -> dict:
    """The page's first Run of each example beside bench's reading of it, in turns (benches.page_versus_bench)."""
    from specviz.benches import page_versus_bench
    from specviz.commands.common_args import draft_model
    from specviz.studies.suite import load_suite

    suite = load_suite("assets/suite.jsonl")
    if args.examples:
        by_id = {item.id: item for item in suite}
        wanted = [name.strip() for name in args.examples.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in by_id]
        if unknown:
            raise SpecvizError(f"Not example prompts of the page: {', '.join(unknown)}.")
        items = [by_id[name] for name in wanted]
    else:
        items = [i for i in suite if i.category != "long-context"]
    lm = load_target(args)
    draft = draft_model(args, [args.method], lm)
    readings = page_versus_bench.measure(lm, draft, items, args.method, args.max_new_tokens, args.repeats,
                                         args.bench_repeats, env, log=log_line)
    lines = [f"{r.example:<16} page {r.page_median:.2f}x {r.page}  bench {r.bench_median:.2f}x {r.bench}  "
             f"page/bench {r.page_over_bench:.2f} {'within' if r.within else 'OUTSIDE'} 10%  tokens page "
             f"{r.page_tokens} bench {r.bench_tokens}" for r in readings]
    lines.append(f"{sum(r.within for r in readings)} of {len(readings)} examples within 10% of bench")
    return emit("\n".join(lines), {"method": args.method, "max_new_tokens": args.max_new_tokens,
                                   "examples": [r.to_dict() for r in readings]}, args.json)
