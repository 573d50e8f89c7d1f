"""`python -m specviz dev state-cost`: what carrying a session's state through a ZeroGPU call costs. A session of a
method is started on a prompt of each context length and stepped; its state is then pickled as a call's argument
is (ui.lab_state.CarriedStates: runtime.state_pickle, shared resources by key) and read back, several times: bytes
and median milliseconds of each direction."""

from __future__ import annotations

import pickle
import statistics
import time


def measure_state_cost(lm, contexts=(500, 4000), method: str = "unified", repeats: int = 5, steps: int = 4) -> list[dict]:
    from specviz.lab.lab import Lab
    from specviz.lab.lab_state import CarriedStates

    words = ("the ferry leaves the north pier at seven and the island school opens at nine while the harbour "
             "master counts the boats ").split()
    rows = []
    for context in contexts:
        text, ids = "", []
        n = 0
        while len(ids) < context - 40:
            text += " ".join(words[(n + i) % len(words)] for i in range(40)) + f" ({n}). "
            n += 1
            ids = lm.tokenizer.encode(text, add_special_tokens=False)
        lab = Lab()
        lab.apply("", f"Summarise: {text}", method, 16, {"model_stage": "on"} if method == "unified" else {})
        for _ in range(steps):
            lab.step(steps * 8)
        dump_ms, load_ms = [], []
        blob = b""
        for _ in range(repeats):
            started = time.perf_counter()
            blob = pickle.dumps(CarriedStates([lab.state]))
            dump_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            pickle.loads(blob).states  # noqa: B018 (read back: resources resolved, tensors rebuilt)
            load_ms.append((time.perf_counter() - started) * 1000)
        rows.append({"method": method, "context_tokens": len(lab.session.context), "bytes": len(blob),
                     "dump_ms": round(statistics.median(dump_ms), 1), "load_ms": round(statistics.median(load_ms), 1)})
    return rows


