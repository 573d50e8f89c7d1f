"""Issue 42's soak test (long: `bash tests/run.sh --long`, or SPECVIZ_LONG_TESTS=1): `python app.py` in public mode
(SPACE_ID set) in its own process, 8 concurrent gradio_client visitors for SPECVIZ_SOAK_S seconds (default 300),
half honest (Step, Run, A/B, a small sweep), half hostile (every input of test_hostile, in a loop), the server's
resident memory sampled every second. Every honest answer comes, every honest Run's output is identical to its
own greedy ar, and the memory ends near where the load left it. It prints the figures docs/benchmarks.md quotes."""

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from app_page import counters_of, named, sweep_answer
from test_app import free_port, settings as page_settings
from test_hostile import chain_trace, self_parent_trace

ROOT = Path(__file__).parent.parent
SOAK_S = float(os.environ.get("SPECVIZ_SOAK_S", "300"))
HONEST_PROMPTS = ["Repeat exactly: red green blue, red green blue, red green blue.",
                  "Rename x to y: def f(x):\n    return x + x",
                  "Count from one to ten in words."]


def settings(**changes) -> dict:
    """/step's named parameters with the public list's first model (its dropdown refuses a blank one)."""
    from specviz.lab.public_policy import Policy

    return page_settings(**{"model": Policy.for_public().default_model, **changes})


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@pytest.fixture
def server(tmp_path):
    port = free_port()
    env = {**os.environ, "SPACE_ID": "specviz-tests/soak", "SPECVIZ_PORT": str(port), "SPECVIZ_HOST": "127.0.0.1",
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "SPECVIZ_HEAD_TRAINING": "off"}
    log = open(tmp_path / "app.log", "w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    from gradio_client import Client

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            Client(f"http://127.0.0.1:{port}/", verbose=False)
            break
        except Exception:  # noqa: BLE001 (not up yet)
            assert process.poll() is None, (tmp_path / "app.log").read_text()[-3000:]
            time.sleep(1)
    yield process, f"http://127.0.0.1:{port}/", tmp_path
    process.terminate()
    process.wait(30)


def honest(url: str, stop: threading.Event, seen: Counter, slowest: list, mismatches: list, errors: list) -> None:
    from gradio_client import Client

    client = Client(url, verbose=False)
    rng = random.Random(threading.get_ident())
    while not stop.is_set():
        prompt = rng.choice(HONEST_PROMPTS)
        method = rng.choice(["pld", "racer", "unified"])
        kind = rng.choice(["step", "run", "ab", "sweep"])
        started = time.monotonic()
        try:
            if kind == "step":
                client.predict(**settings(prompt=prompt, method=method, max_new_tokens=16), api_name="/step")
            elif kind == "run":
                client.predict(api_name="/reset")
                out = named(client.predict(**settings(prompt=prompt, method=method, max_new_tokens=24),
                                           api_name="/run"))
                versus = (counters_of(client) or {}).get("versus_ar")
                if not (versus and versus["identical"]):
                    mismatches.append((method, prompt, out["counters"][-300:], out["message"]))
            elif kind == "ab":
                client.predict(side_a="", side_b="method=pld", **settings(prompt=prompt, method=method,
                                                                          max_new_tokens=12), api_name="/ab_run")
            else:
                out = client.predict(axis_1="budget=4,8", axis_2="", scope="page prompt", category="code-edit",
                                     sweep_tokens=8, metric="speedup",
                                     **settings(prompt=prompt, method="racer", max_new_tokens=8), api_name="/sweep")
                message = sweep_answer(out)["message"]
                assert "Sweep done" in message, message
        except Exception as error:  # noqa: BLE001 (an honest request must be answered: counted, reported)
            errors.append(f"{kind}: {type(error).__name__}: {error}")
            continue
        seen[kind] += 1
        slowest.append((time.monotonic() - started, kind))


def hostile(url: str, stop: threading.Event, seen: Counter, folder: Path) -> None:
    from gradio_client import Client, handle_file

    client = Client(url, verbose=False)
    files = []
    for name, data in [("self-parent.json", self_parent_trace()), ("chain.json", chain_trace(30_000)),
                       ("deep.json", "[" * 50_000 + "]" * 50_000)]:
        path = folder / f"{threading.get_ident()}-{name}"
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        files.append(str(path))
    bad = [dict(max_new_tokens="nan"), dict(seed="inf"), dict(budget=1e400), dict(prompt="x" * 32_001),
           dict(method="reader", datastore_grow=1), dict(temperature={"a": 1}), dict(max_new_tokens=-5)]
    rng = random.Random(threading.get_ident())
    while not stop.is_set():
        kind = rng.choice(["upload", "bad-step", "ab_reset", "tick-limit"])
        try:
            if kind == "upload":
                client.predict(handle_file(rng.choice(files)), api_name="/upload_trace")
            elif kind == "bad-step":
                client.predict(**{**settings(max_new_tokens=8), **rng.choice(bad)}, api_name="/step")
            elif kind == "ab_reset":
                for _ in range(10):
                    client.predict(api_name="/ab_reset")
            else:
                client.predict(**settings(max_new_tokens=100_000), api_name="/run")
        except Exception:  # noqa: BLE001 (Gradio's own refusals come back as errors: that is an answer)
            kind += " (refused by Gradio)"
        seen[kind] += 1


@pytest.mark.long
def test_soak_honest_and_hostile_visitors(server):
    process, url, folder = server
    stop = threading.Event()
    honest_seen, hostile_seen = Counter(), Counter()
    slowest, mismatches, errors, memory = [], [], [], []
    threads = [threading.Thread(target=honest, args=(url, stop, honest_seen, slowest, mismatches, errors))
               for _ in range(4)]
    threads += [threading.Thread(target=hostile, args=(url, stop, hostile_seen, folder)) for _ in range(4)]
    start_mb = rss_mb(process.pid)
    for thread in threads:
        thread.start()
    ends = time.monotonic() + SOAK_S
    while time.monotonic() < ends:
        memory.append(rss_mb(process.pid))
        time.sleep(1)
    stop.set()
    for thread in threads:
        thread.join(300)
    time.sleep(6)  # the debounced collection after the last resets
    end_mb = rss_mb(process.pid)
    report = {"seconds": SOAK_S, "honest": dict(honest_seen), "hostile": dict(hostile_seen),
              "slowest_honest_s": round(max(slowest)[0], 2) if slowest else None,
              "slowest_kind": max(slowest)[1] if slowest else None,
              "rss_mb": {"start": round(start_mb), "peak": round(max(memory)), "end": round(end_mb)},
              "honest_errors": errors[:5], "mismatches": mismatches[:3]}
    print("soak:", json.dumps(report))
    assert process.poll() is None, "the server died"
    assert not errors, errors[:5]
    assert not mismatches, mismatches[:3]
    assert sum(honest_seen.values()) >= 8 and sum(hostile_seen.values()) >= 8
    assert max(memory) < 14 * 1024  # a 16 GB Space, with margin
