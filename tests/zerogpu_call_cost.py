"""What a ZeroGPU call costs beyond its work, measured with the stand-in (tests/zerogpu_standin.py: a forked worker
per call, pickles both ways): a Step and a Run of the default model in this process against the same through a
forked call, interleaved, medians; beside each the duration ui.gpu declares for it.

    .venv/bin/python tests/zerogpu_call_cost.py [--repeats 5] [--run-tokens 32]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]

import torch  # noqa: E402

from zerogpu_standin import forked  # noqa: E402
from specviz.lab import model_calls  # noqa: E402
from specviz.lab.lab import Lab  # noqa: E402
from specviz.lab.visitor_request import checked_settings  # noqa: E402
from specviz.lab.lab_state import CallAction, ModelCall  # noqa: E402

PROMPT = "Rename count to total:\ndef f(xs):\n    count = 0\n    for x in xs:\n        count += x\n    return count"


def timed(action, tokens: int) -> float:
    lab = Lab()
    lab.choose_values("", PROMPT, "unified", "auto", {})
    lab.step(tokens + 64)  # the session exists; what is timed is one more call
    started = time.perf_counter()
    if action is CallAction.STEP:
        lab.step(tokens + 64)  # one step (its limit far off)
    else:
        for _ in lab.run(len(lab.session.output_ids) + tokens, every_s=60):
            pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--run-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)  # forks need one compute thread (zerogpu_standin); both sides run alike
    entry = forked(model_calls.run_model)
    results = {}
    for action, tokens in ((CallAction.STEP, 1), (CallAction.RUN, args.run_tokens)):
        here, there = [], []
        for _ in range(args.repeats):
            model_calls.run_calls_with(None)
            here.append(timed(action, tokens))
            model_calls.run_calls_with(entry)
            there.append(timed(action, tokens))
        model_calls.run_calls_with(None)
        settings = checked_settings("", PROMPT, "unified", "auto", {})
        declared = model_calls.call_seconds(ModelCall(action, (settings,), tokens))
        results[action.value] = here_s, there_s, _ = statistics.median(here), statistics.median(there), declared
        print(f"{action.value} ({tokens} token{'s' if tokens > 1 else ''}): in this process {here_s:.3f} s, "
              f"through a forked call {there_s:.3f} s (+{there_s - here_s:.3f} s); "
              f"declared to ZeroGPU {declared} s", flush=True)


if __name__ == "__main__":
    main()
