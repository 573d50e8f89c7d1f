"""`python -m specviz dev state-cost`: what carrying a session's state through a ZeroGPU call costs. A session of a
method is started on a prompt of each context length and stepped; its state is then pickled as a call's argument
is (runtime.state_pickle) and read back, several times, both ways a state can travel: with its KV caches whole, and
as the tokens they hold (the default), where the receiving process rebuilds each cache with one prefill forward on
its own device. Bytes and median milliseconds of each part."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class StateCost:
    method: str
    context_tokens: int
    caches: str          # "whole" or "rebuilt"
    bytes: int
    dump_ms: float       # pickled (the sender)
    load_ms: float       # read back (the receiver)
    rebuild_ms: float    # the caches rebuilt from their tokens on the receiver's device (0 when they travelled)

    @property
    def per_call_ms(self) -> float:
        """One direction's cost: what a call pays twice (its argument and its result)."""
        return self.dump_ms + self.load_ms

    def line(self) -> str:
        rebuilt = f", caches rebuilt in {self.rebuild_ms:.0f} ms" if self.caches == "rebuilt" else ""
        return (f"{self.method} at {self.context_tokens} tokens of context, caches {self.caches}: "
                f"{self.bytes / 2**20:.2f} MB, pickled in {self.dump_ms:.1f} ms, read back in {self.load_ms:.1f} ms"
                f"{rebuilt}")


def _long_prompt(lm, context: int) -> str:
    words = ("the ferry leaves the north pier at seven and the island school opens at nine while the harbour "
             "master counts the boats ").split()
    text, ids, n = "", [], 0
    while len(ids) < context - 40:
        text += " ".join(words[(n + i) % len(words)] for i in range(40)) + f" ({n}). "
        n += 1
        ids = lm.tokenizer.encode(text, add_special_tokens=False)
    return f"Summarise: {text}"


def measure_state_cost(lm, contexts=(500, 4000), method: str = "unified", repeats: int = 5,
                       steps: int = 4) -> list[StateCost]:
    from specviz.lab.lab import Lab
    from specviz.runtime import state_pickle

    rows = []
    for context in contexts:
        lab = Lab()
        params = {"model_stage": "on"} if method == "unified" else {}
        lab.choose_values("", _long_prompt(lm, context), method, 16, params)
        for _ in range(steps):
            lab.step(steps * 8)
        for caches in (True, False):
            dump_ms, load_ms, rebuild_ms = [], [], []
            blob = b""
            for _ in range(repeats):
                started = time.perf_counter()
                blob = state_pickle.dumps(lab.state, caches=caches)
                dump_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                back = state_pickle.loads(blob)
                load_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                for session in back.sessions():
                    session.ensure_cache()
                rebuild_ms.append((time.perf_counter() - started) * 1000)
            rows.append(StateCost(method, len(lab.session.context), "whole" if caches else "rebuilt", len(blob),
                                  statistics.median(dump_ms), statistics.median(load_ms),
                                  statistics.median(rebuild_ms) if not caches else 0.0))
    return rows
