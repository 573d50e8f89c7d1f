"""Issue 45's forward figures on a GPU (tests/gpu_checks.sh runs it; never in CI): the verify forward captured
(CUDA graphs over the static cache) against eager (the dynamic cache) by tree size, interleaved so drift moves
both alike, and how far the captured logits are from the eager ones on the same trees (max |diff|, argmax
agreement, the top-2 margin where they disagree); then the same for one level of the draft head (a random head of the
default's shape: timings depend on shapes only) by level width, after a feed of the context. Prints two tables;
--json writes them."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from specviz.engine.tree_forward import tree_forward
from specviz.runtime import captured_forward
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.loading import load_model
from specviz.tree.draft_tree import DraftTree


def chain(root: int, tokens: list[int]) -> DraftTree:
    tree = DraftTree(root)
    if tokens:
        tree.add_path(tokens, "retrieval")
    return tree


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--mode", default="fp32")
    parser.add_argument("--sizes", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--graphs", default="on", help="on (CUDA) or static (the CPU's dry run)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    lm = load_model(args.model, args.device, mode=args.mode, graphs="off")
    regimes = (args.graphs, "off")
    sync = torch.cuda.synchronize if lm.device.type == "cuda" else (lambda: None)
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(100, lm.vocab_size - 1, (args.context + 256,), generator=generator).tolist()
    caches = {}
    for regime in regimes:
        captured_forward.install(lm, regime)
        caches[regime] = lm.new_cache()
        causal_forward(lm, caches[regime], context[:args.context])
    sizes = [int(s) for s in args.sizes.split(",")]
    trees = [chain(context[args.context], context[args.context + 1:args.context + q]) for q in sizes]
    times = {(r, q): [] for r in regimes for q in sizes}
    agreement = {}
    for round_ in range(args.repeats + 2):  # two warm-up rounds (captures, kernels' first calls)
        for q, tree in zip(sizes, trees):
            logits = {}
            for regime in regimes:
                captured_forward.install(lm, regime)
                sync()
                started = time.perf_counter()
                logits[regime] = tree_forward(lm, caches[regime], tree, args.context)
                sync()
                elapsed = (time.perf_counter() - started) * 1000
                caches[regime].crop(-len(tree))
                if round_ >= 2:
                    times[(regime, q)].append(elapsed)
            if round_ == 0:
                a, b = logits[regimes[0]], logits["off"]
                top2 = b.topk(2, dim=-1).values
                differ = (a.argmax(-1) != b.argmax(-1))
                agreement[q] = {"max_abs_diff": float((a - b).abs().max()),
                                "argmax_agree": int((~differ).sum()), "rows": q,
                                "margins_where_differ": [round(float(m), 5) for m in (top2[:, 0] - top2[:, 1])[differ]]}
    rows = [{"tokens": q, "captured_ms": round(statistics.median(times[(regimes[0], q)]), 3),
             "eager_ms": round(statistics.median(times[("off", q)]), 3), **agreement[q]} for q in sizes]
    captured_forward.install(lm, regimes[0])
    print(f"{lm.name} {lm.mode} on {lm.device} ({torch.cuda.get_device_name() if lm.device.type == 'cuda' else 'cpu'}), "
          f"context {args.context}, median of {args.repeats}; verifier: {lm.verifier.describe()}")
    print(f"{'tokens':>6} {'captured ms':>12} {'eager ms':>9} {'ratio':>6} {'max|diff|':>10} {'argmax agree':>12}")
    for row in rows:
        print(f"{row['tokens']:>6} {row['captured_ms']:>12.3f} {row['eager_ms']:>9.3f} "
              f"{row['eager_ms'] / row['captured_ms']:>6.1f} {row['max_abs_diff']:>10.2e} "
              f"{row['argmax_agree']:>5}/{row['rows']:<6} {row['margins_where_differ'] or ''}")
    for note in lm.notes + (lm.verifier.notes if lm.verifier else []):
        print("note:", note)
    head_rows = head_levels(lm, regimes, args, sync)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": lm.name, "mode": lm.mode, "rows": rows, "head_levels": head_rows}, f, indent=1)


def head_levels(lm, regimes: tuple, args, sync) -> list[dict]:
    """One draft-head level of w nodes (each sees the fed context and itself), captured (runtime.captured_head)
    against eager, interleaved; max |diff| of the logits."""
    from specviz.runtime.draft_head import DraftHead, HeadNetwork, HeadRecord, target_identity, target_shape

    torch.manual_seed(0)
    draft_ids = torch.randperm(lm.vocab_size)[:8192]
    network = HeadNetwork(lm, target_shape(lm, 1536, 8192), draft_ids)
    head = DraftHead(lm, network, HeadRecord(target=target_identity(lm), shape=network.shape))
    generator = torch.Generator().manual_seed(1)
    n = args.context
    features = torch.randn(n, head.feature_width, generator=generator)
    tokens = torch.randint(100, lm.vocab_size - 1, (n,), generator=generator).tolist()
    caches = {}
    for regime in regimes:
        captured_forward.install(lm, regime)
        caches[regime] = head.new_cache()
        head.forward(features, tokens, list(range(n)), torch.ones((n, n), dtype=torch.bool).tril(), caches[regime])
    widths = [w for w in (1, 4, 16, 64) if w <= max(int(q) for q in args.sizes.split(","))]
    times = {(r, w): [] for r in regimes for w in widths}
    diffs = {}
    for round_ in range(args.repeats + 2):
        for w in widths:
            visible = torch.zeros((w, n + w), dtype=torch.bool)
            visible[:, :n] = True
            visible[torch.arange(w), n + torch.arange(w)] = True
            rows = features[:w]
            out = {}
            for regime in regimes:
                captured_forward.install(lm, regime)
                sync()
                started = time.perf_counter()
                out[regime] = head.forward(rows, tokens[:w], [n] * w, visible, caches[regime])[0]
                sync()
                elapsed = (time.perf_counter() - started) * 1000
                caches[regime].crop(-w)
                if round_ >= 2:
                    times[(regime, w)].append(elapsed)
            if round_ == 0:
                diffs[w] = float((out[regimes[0]] - out["off"]).abs().max())
    rows = [{"nodes": w, "captured_ms": round(statistics.median(times[(regimes[0], w)]), 3),
             "eager_ms": round(statistics.median(times[("off", w)]), 3), "max_abs_diff": diffs[w]} for w in widths]
    runner = head.static_runner(caches[regimes[0]])
    print(f"draft head level after {n} fed positions, median of {args.repeats}; {runner.describe()}")
    print(f"{'nodes':>6} {'captured ms':>12} {'eager ms':>9} {'ratio':>6} {'max|diff|':>10}")
    for row in rows:
        print(f"{row['nodes']:>6} {row['captured_ms']:>12.3f} {row['eager_ms']:>9.3f} "
              f"{row['eager_ms'] / row['captured_ms']:>6.1f} {row['max_abs_diff']:>10.2e}")
    for note in runner.notes:
        print("note:", note)
    return rows


if __name__ == "__main__":
    main()
