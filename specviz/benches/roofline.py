"""Each verify forward against this machine's roofline (`python -m specviz dev roofline`).

The probes (runtime.native.roofline_probe) give the memory bandwidth of a streaming read and the FMA peak on the
threads the model runs. A forward of q tree tokens after a context of `context_len` tokens (the cache holds all but
the last, which is the tree's root) must read every linear weight once plus the keys and values, and compute 2 FLOPs
per weight per token plus its attention over every key (the kernel scores masked keys too); its
bound is the larger of bytes / bandwidth and FLOPs / peak. The forwards are timed interleaved (one round through
every size per repeat, so drift moves them alike), with the linear layers alone beside them (what the rest of
the forward costs), and `fraction` says how close each comes to its bound (1.0: at the roofline).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from specviz.benches.profile_forward import LinearOnly, prefilled_chains
from specviz.engine.tree_forward import tree_forward
from specviz.runtime import linear_paths
from specviz.runtime.native import build, linear_kernel
from specviz.runtime.native.roofline_probe import Roofline, measure

# the targets against the machine's own one-token forward (issue 63)
TARGET_X_ONE_TOKEN = {8: 1.25, 16: 1.6}
TARGET_PEAK_SHARE = {64: 0.70}


@dataclass(frozen=True)
class ForwardWork:
    """What a forward of `tokens` tree tokens must read and compute at least."""
    tokens: int
    bytes_read: float   # every linear weight once (the gguf mode: its blocks), and the cache's keys and values
    flops: float        # fp32: 2 per weight per token (not in the gguf mode), and the attention's q.k and p.v
    int_ops: float = 0.0  # the gguf mode: 2 per weight per token, the linear layers' 8-bit multiply-adds


@dataclass(frozen=True)
class ForwardAgainstBound:
    tokens: int
    ms: float               # median verify forward
    linear_ms: float        # median of the linear layers alone, as the forward calls them
    x_one_token: float      # ms against the one-token forward's ms
    bound_ms: float
    bound: str              # 'bytes' or 'flops'
    fraction: float         # bound_ms / ms
    gflops: float           # the forward's FLOPs per second
    peak_share: float       # gflops against the FMA peak of the threads used
    bytes_gbs: float        # the bytes it must read, per second of it
    int_gops: float = 0.0   # the gguf mode: the linear layers' 8-bit multiply-adds (2 ops each) per second


def forward_work(lm, tokens: int, context_len: int) -> ForwardWork:
    from specviz.runtime.fast_linear import BLOCKS_ATTRIBUTE

    config = lm.model.config
    linear = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    weights = sum(m.weight.numel() for m in linear)
    element = linear[0].weight.element_size()
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    keys = context_len - 1 + tokens  # the cache's entries, then the tree's own
    cache_bytes = layers * 2 * kv_heads * head_dim * keys * element
    attention_flops = layers * heads * tokens * keys * head_dim * 4
    if lm.quantised:  # the blocks as the kernel reads them (a tied head's are the embedding's, read once a forward)
        blocks = {id(b): b for b in (getattr(m, BLOCKS_ATTRIBUTE) for m in linear)}
        return ForwardWork(tokens, float(sum(b.nbytes for b in blocks.values()) + cache_bytes),
                           float(attention_flops), float(2 * weights * tokens))
    return ForwardWork(tokens, float(weights * element + cache_bytes), float(2 * weights * tokens + attention_flops))


@torch.inference_mode()
def time_forwards(lm, sizes: list[int], context_len: int, repeats: int) -> dict[int, tuple[float, float]]:
    """(median forward ms, median linear-only ms) per size, every size once per repeat in turn."""
    cache, trees = prefilled_chains(lm, context_len, sizes, seed=0)
    linear = {q: LinearOnly(lm, q) for q in sizes}
    forward_times: dict[int, list[float]] = {q: [] for q in sizes}
    linear_times: dict[int, list[float]] = {q: [] for q in sizes}
    for repeat in range(repeats + 1):  # the first round warms up
        for q in sizes:
            started = time.perf_counter()
            tree_forward(lm, cache, trees[q], context_len - 1)
            elapsed = (time.perf_counter() - started) * 1000
            cache.crop(-q)
            linear_ms = linear[q].ms()
            if repeat:
                forward_times[q].append(elapsed)
                linear_times[q].append(linear_ms)
    return {q: (statistics.median(forward_times[q]), statistics.median(linear_times[q])) for q in sizes}


@dataclass(frozen=True)
class RooflineReport:
    processor: str
    isa: str
    context_len: int
    roofline: Roofline
    rows: list[ForwardAgainstBound]

    def to_json(self) -> dict:
        return {"processor": self.processor, "isa": self.isa, "context_len": self.context_len,
                "roofline": asdict(self.roofline), "rows": [asdict(r) for r in self.rows]}


def measure_report(lm, sizes: list[int], context_len: int = 512, repeats: int = 7) -> RooflineReport:
    roofline = measure(torch.get_num_threads())
    if 1 not in sizes:
        sizes = [1, *sizes]
    timed = time_forwards(lm, sorted(set(sizes)), context_len, repeats)
    one_token = timed[1][0]
    rows = []
    for q, (ms, linear_ms) in timed.items():
        work = forward_work(lm, q, context_len)
        bound_ms, bound = roofline.bound_ms(work.bytes_read, work.flops)
        gflops = work.flops / ms / 1e6
        rows.append(ForwardAgainstBound(q, ms, linear_ms, ms / one_token, bound_ms, bound, bound_ms / ms, gflops,
                                        gflops / roofline.fma_gflops, work.bytes_read / ms / 1e6,
                                        work.int_ops / linear_ms / 1e6 if linear_ms else 0.0))
    try:
        arch = build.architecture()
    except RuntimeError as error:
        arch = str(error)
    if lm.quantised:
        from specviz.runtime.native import quant_linear_kernel

        isa = f"-march={arch} (gguf: {quant_linear_kernel.isa() or 'not built'})"
    else:
        isa = f"-march={arch} ({linear_kernel.isa() or 'not built'})"
    return RooflineReport(linear_paths.processor_name(), isa, context_len, roofline, rows)


def processor_flags() -> str:
    """The vector features of this processor that the kernels' branches depend on."""
    flags = set()
    for line in build.processor().splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            flags |= set(line.split(":", 1)[1].split())
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "asimd")
    return " ".join(f for f in wanted if f in flags) or "none of avx2, fma, avx512f"


def targets(report: RooflineReport) -> list[str]:
    """Each of the issue's targets this report can judge: met or missed, with the figure."""
    by_tokens = {r.tokens: r for r in report.rows}
    lines = []
    for q, most in TARGET_X_ONE_TOKEN.items():
        if q in by_tokens:
            x = by_tokens[q].x_one_token
            lines.append(f"{q} tokens at most {most:.2f}x one token: {x:.2f}x, {'met' if x <= most else 'missed'}")
    for q, least in TARGET_PEAK_SHARE.items():
        if q in by_tokens:
            share = by_tokens[q].peak_share
            lines.append(f"{q} tokens at {least:.0%} of the FMA peak or better: {share:.0%}, "
                         f"{'met' if share >= least else 'missed'}")
    return lines


def format_report(lm, report: RooflineReport) -> str:
    r = report.roofline
    lines = [f"roofline of {report.processor} ({processor_flags()}), kernels {report.isa}, {r.threads} threads",
             f"  streaming read: {r.read_gbs_one_thread:.1f} GB/s on 1 thread, {r.read_gbs:.1f} GB/s on {r.threads}",
             f"  FMA peak ({r.vector_floats}-float vectors): {r.fma_gflops_one_thread:.0f} GFLOP/s on 1 thread, "
             f"{r.fma_gflops:.0f} GFLOP/s on {r.threads}",
             f"verify forward of {lm.name} ({str(lm.dtype).replace('torch.', '')}, linear={lm.linear}) after a context of "
             f"{report.context_len} tokens, medians of interleaved repeats:",
             f"{'tokens':>6} {'ms':>8} {'x 1 tok':>8} {'linear ms':>10} {'rest ms':>8} {'bound':>6} {'bound ms':>9} "
             f"{'fraction':>9} {'GFLOP/s':>8} {'of peak':>8} {'GB/s':>6}"
             + (f" {'int GOP/s':>10}" if lm.quantised else "")]
    if lm.quantised:
        lines.insert(-1, "  the gguf mode: bytes are the quantised blocks, GFLOP/s the fp32 attention's alone, int GOP/s "
                         "the linear layers' 8-bit multiply-adds (2 ops each) over their own time")
    for row in report.rows:
        lines.append(f"{row.tokens:>6} {row.ms:>8.2f} {row.x_one_token:>8.2f} {row.linear_ms:>10.2f} "
                     f"{row.ms - row.linear_ms:>8.2f} {row.bound:>6} {row.bound_ms:>9.2f} {row.fraction:>9.2f} "
                     f"{row.gflops:>8.1f} {row.peak_share:>8.0%} {row.bytes_gbs:>6.1f}"
                     + (f" {row.int_gops:>10.1f}" if lm.quantised else ""))
    lines += [f"target: {line}" for line in targets(report)]
    return "\n".join(lines)
