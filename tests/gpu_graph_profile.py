"""Where a captured verify forward's time goes on a GPU (issue 45; tests/gpu_checks.sh PART=3, never in CI):
for each op variant of runtime.captured_forward (ForwardOps: torch's RMSNorm chain or its fused kernel; gate and
up as two matmuls or one; SDPA or three plain kernels for attention), the forward's wall time at 1 and 64 tokens, the device time of one replay and how many
kernels it runs (torch.profiler), its heaviest kernels, the logits against the first variant's, and the SM
clock while replays run."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading
import time

import torch
from torch.profiler import ProfilerActivity, profile

from specviz.engine.tree_forward import tree_forward
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.captured_forward import ForwardOps
from specviz.runtime.loading import load_model

from gpu_graph_timings import chain  # this script's folder is on the path when it runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", default="fp32")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--device", default="cuda", help="cuda; cpu runs it uncaptured as a dry run")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    lm = load_model(args.model, args.device, mode=args.mode, graphs="on" if cuda else "static")
    verifier = lm.verifier
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(100, lm.vocab_size - 1, (args.context + 64,), generator=generator).tolist()
    cache = lm.new_cache()
    causal_forward(lm, cache, context[:args.context])
    trees = {q: chain(context[args.context], context[args.context + 1:args.context + q]) for q in (1, 64)}

    def forward(q):
        logits = tree_forward(lm, cache, trees[q], args.context)
        cache.crop(-q)
        return logits

    first = {}
    for ops in (ForwardOps(), ForwardOps(matmul_attention=True), ForwardOps(True, True),
                ForwardOps(True, True, True)):
        verifier.set_ops(ops)
        line = [ops.label()]
        for q in (1, 64):
            for _ in range(3):
                logits = forward(q)
            times = []
            for _ in range(30):
                started = time.perf_counter()
                forward(q)
                times.append((time.perf_counter() - started) * 1000)
            if q not in first:
                first[q] = logits
            diff = float((logits - first[q]).abs().max())
            agree = int((logits.argmax(-1) == first[q].argmax(-1)).sum())
            line.append(f"{q} tok {statistics.median(times):.3f} ms (max|diff| {diff:.1e}, argmax {agree}/{q})")
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            for _ in range(5):
                forward(1)
            if cuda:
                torch.cuda.synchronize()
        kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
        kernels = [e for e in prof.events() if e.device_type == kind and (cuda or e.name.startswith("aten::"))]
        device_ms = sum(e.device_time if cuda else e.self_cpu_time_total for e in kernels) / 1000 / 5
        line.append(f"1 tok replay: {len(kernels) / 5:.0f} kernels, {device_ms:.3f} ms of kernel time")
        print(" | ".join(line), flush=True)
        by_name: dict[str, list[float]] = {}
        for e in kernels:
            by_name.setdefault(e.name[:70], []).append(e.device_time if cuda else e.self_cpu_time_total)
        top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:8]
        for name, values in top:
            print(f"    {sum(values) / 5 / 1000:7.3f} ms  {len(values) / 5:5.0f}x  {name}")
    # the SM clock while 1-token replays run back to back (launch-bound work may not raise it)
    clocks = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            clocks.append(subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader"],
                                         capture_output=True, text=True).stdout.strip())
            time.sleep(0.2)

    if not cuda:
        return
    thread = threading.Thread(target=poll)
    thread.start()
    until = time.perf_counter() + 2.0
    while time.perf_counter() < until:
        forward(1)
    stop.set()
    thread.join()
    print("SM clock during 1-token replays (MHz, max):", "; ".join(clocks[-5:]))
    print("verifier:", verifier.describe(), "; notes:", verifier.notes or "none")


if __name__ == "__main__":
    main()
