"""Where a verify forward's time goes: the full tree forward against its linear layers alone.

For q tree tokens over a cache of `context_len` entries, three medians:
- `forward_ms`: the verify forward as the engine runs it (mask, rotary, attention over the cache, norms,
  the linear layers, the head);
- `linear_ms`: every linear layer of the model applied once to q rows, with the kernel and weights the
  forward runs (the native kernel or oneDNN, q/k/v fused; else stock) and called as the forward calls
  them (one native call where runtime.native.decoder_kernel runs the forward): the part no change outside the
  linear layers can remove;
- the median of their ratio, forward and linear-only timed in turn (issue target: at most 1.25);
- `stock_linear_ms` and `stock_ratio`: the same against the issue's own yardstick, PyTorch's stock
  `F.linear` on the dense weights (where the model runs another kernel; else the same figures).
`top_ops` lists the heaviest operators of one forward (torch.profiler, self CPU time) to say what the rest is.
"""

from __future__ import annotations

import statistics
import time

import torch

from specviz.engine.tree_forward import tree_forward
from specviz.runtime import linear_paths
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.native import build, linear_kernel
from specviz.tree.draft_tree import DraftTree


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _chain(root: int, tokens: list[int]) -> DraftTree:
    tree = DraftTree(root)
    node = 0
    for token in tokens:
        node = tree.add(node, token, "logits")
    return tree


def prefilled_chains(lm, context_len: int, sizes: list[int], seed: int) -> tuple[object, dict[int, DraftTree]]:
    """A cache holding a random context of `context_len` tokens but its last, which is the root of a chain tree of
    each size q (q tokens: the root and the context's continuation), as the engine verifies one."""
    generator = torch.Generator().manual_seed(seed)
    context = torch.randint(100, lm.vocab_size - 1, (context_len + max(sizes),), generator=generator).tolist()
    cache = lm.new_cache()
    causal_forward(lm, cache, context[:context_len - 1])
    return cache, {q: _chain(context[context_len - 1], context[context_len:context_len + q - 1]) for q in sizes}


class LinearOnly:
    """Every linear layer of the model applied once to (1, rows, in_features) inputs, with the kernel
    the model runs (stock=False: the lean forward's own kernel and weights where it runs, fused q/k/v
    included, else the modules') or with PyTorch's stock F.linear on the dense weights (stock=True)."""

    def __init__(self, lm, rows: int, stock: bool = False):
        self.lm, self.stock = lm, stock
        lean = lm.decoder
        native = lean.native_decoder() if lean is not None and not stock else None
        if native is not None:  # the forward is one native call: its linear layers alone are one too
            self.calls, self.inputs = [(lambda _: native.linear_only(rows), 0)], {0: None}
            return
        if lean is not None and not stock:
            # (weight, bias, in_features) as the lean forward calls them
            weights = [(w, b, n) for (_, qkv, qkv_bias, w_o, b_o, _, w_gate, w_up, w_down), layer
                       in zip(lean.layers, lm.model.model.layers)
                       for w, b, n in ((qkv, qkv_bias, layer.self_attn.q_proj.in_features),
                                       (w_o, b_o, layer.self_attn.o_proj.in_features),
                                       (w_gate, None, layer.mlp.gate_proj.in_features),
                                       (w_up, None, layer.mlp.up_proj.in_features),
                                       (w_down, None, layer.mlp.down_proj.in_features))]
            weights.append((lean.head, getattr(lm.model.lm_head, "bias", None), lm.model.lm_head.in_features))
            self.calls = [(lambda x, w=w, b=b: lean.linear(x, w, b), n) for w, b, n in weights]
        else:
            modules = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
            self.calls = [((lambda x, m=m: torch.nn.functional.linear(x, m.weight, m.bias)) if stock else m,
                           m.in_features) for m in modules]
        self.inputs = {n: torch.randn(1, rows, n, dtype=lm.dtype, device=lm.device) for _, n in self.calls}

    @torch.inference_mode()
    def ms(self) -> float:
        _sync(self.lm.device)
        started = time.perf_counter()
        for call, in_features in self.calls:
            call(self.inputs[in_features])
        _sync(self.lm.device)
        return (time.perf_counter() - started) * 1000


@torch.inference_mode()
def forward_ms(lm, q: int, context_len: int, repeats: int, profile: bool = False):
    """Medians of the forward, of the linear layers alone (the model's kernel, then stock F.linear) and of
    the forward's ratio to each (timed in turn within each repeat), and the heaviest operators of one
    more forward (profile)."""
    cache, trees = prefilled_chains(lm, context_len, [q], seed=q)
    tree = trees[q]
    # interleaved with the linear layers alone and the forward with each other linear kernel, so machine
    # drift moves them all alike
    linear, stock = LinearOnly(lm, q), LinearOnly(lm, q, stock=True)
    times, linear_times, stock_times = [], [], []
    kernels = lm.linear_candidates() if lm.measures_linear_paths() else []
    kernel_times: dict[str, list[float]] = {k: [] for k in kernels}
    for _ in range(repeats + 1):
        _sync(lm.device)
        started = time.perf_counter()
        tree_forward(lm, cache, tree, context_len - 1)
        _sync(lm.device)
        times.append((time.perf_counter() - started) * 1000)
        cache.crop(-q)
        linear_times.append(linear.ms())
        stock_times.append(stock.ms())
        for kernel in kernels:
            with lm.decoder.forcing(kernel):
                started = time.perf_counter()
                tree_forward(lm, cache, tree, context_len - 1)
                kernel_times[kernel].append((time.perf_counter() - started) * 1000)
            cache.crop(-q)
    top = None
    if profile:
        from torch.profiler import ProfilerActivity, profile as torch_profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if lm.device.type == "cuda" else [])
        with torch_profile(activities=activities) as prof:
            tree_forward(lm, cache, tree, context_len - 1)
            _sync(lm.device)
        cache.crop(-q)
        averages = prof.key_averages()
        # the device's own time where there is one (torch >= 2.4 names it self_device_time_total)
        key = next((k for k in ("self_device_time_total", "self_cuda_time_total")
                    if lm.device.type == "cuda" and averages and hasattr(averages[0], k)), "self_cpu_time_total")
        events = sorted(averages, key=lambda e: getattr(e, key), reverse=True)[:8]
        top = [(e.key, round(getattr(e, key) / 1000, 2), e.count) for e in events]
    ratios = [f / l for f, l in zip(times[1:], linear_times[1:])]
    stock_ratios = [f / l for f, l in zip(times[1:], stock_times[1:])]
    return {"forward_ms": statistics.median(times[1:]), "linear_ms": statistics.median(linear_times[1:]),
            "ratio": statistics.median(ratios), "stock_linear_ms": statistics.median(stock_times[1:]),
            "stock_ratio": statistics.median(stock_ratios), "top_ops": top,
            "kernel": lm.linear_path_for(q),
            "kernel_forward_ms": {k: round(statistics.median(v[1:]), 2) for k, v in kernel_times.items()}}


def profile(lm, sizes=(1, 16, 64), context_len: int = 512, repeats: int = 7, with_ops: bool = True) -> list[dict]:
    rows = []
    for q in sizes:
        measured = forward_ms(lm, q, context_len, repeats, profile=with_ops)
        rows.append({"tokens": q, **{k: round(v, 3 if "ratio" in k else 2) for k, v in measured.items()
                                     if isinstance(v, float)},
                     **{k: measured[k] for k in ("top_ops", "kernel", "kernel_forward_ms")}})
    return rows


def _architecture() -> str:
    try:
        return build.architecture()
    except RuntimeError as error:
        return str(error)


def format_profile(lm, rows: list[dict]) -> str:
    lines = [f"verify forward vs linear layers alone ({lm.name}, {lm.device.type}, "
             f"{str(lm.dtype).replace('torch.', '')}, linear={lm.linear}{' packed' if getattr(lm, 'packed', False) and lm.linear == 'onednn' else ''}, compiled={getattr(lm, 'compiled', False)}, "
             f"{torch.get_num_threads()} threads)",
             f"{'tokens':>6} {'forward ms':>11} {'linear ms':>10} {'ratio':>6}   "
             f"{'stock F.linear ms':>17} {'ratio':>6}"]
    for r in rows:
        lines.append(f"{r['tokens']:>6} {r['forward_ms']:>11.2f} {r['linear_ms']:>10.2f} {r['ratio']:>6.2f}   "
                     f"{r['stock_linear_ms']:>17.2f} {r['stock_ratio']:>6.2f}")
    kernels = sorted({k for r in rows for k in r["kernel_forward_ms"]})
    if kernels:
        lines.append(f"the forward with each linear kernel (ms), and the one this model runs at that size:")
        lines.append(f"{'tokens':>6} " + " ".join(f"{k:>10}" for k in kernels) + f" {'runs':>8}")
        for r in rows:
            lines.append(f"{r['tokens']:>6} " + " ".join(f"{r['kernel_forward_ms'][k]:>10.2f}" for k in kernels)
                         + f" {r['kernel']:>8}")
    lines.append(f"linear kernel by tree size: {lm.linear_summary()}")
    lines.append(f"processor: {linear_paths.processor_name()}; native kernels built for -march="
                 f"{_architecture()} ({linear_kernel.isa() or 'not built'})")
    for r in rows:
        if r["top_ops"]:
            lines.append(f"heaviest operators at {r['tokens']} tokens (self ms, calls): "
                         + "; ".join(f"{name} {ms} ({n})" for name, ms, n in r["top_ops"]))
    return "\n".join(lines)
