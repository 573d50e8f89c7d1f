"""Issue 58's inputs, each sent once to a public-mode server of its own (tests/public_server.py), with what it gets
and how long it takes: the figures docs/benchmarks.md quotes ("A fair share per visitor"). Not a test: it prints.
Usage: .venv/bin/python tests/hostile_report.py [--timeout S]"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from public_server import started  # noqa: E402
from test_app import settings  # noqa: E402
from test_cost_fuzz import TraceShape, build_trace  # noqa: E402
from browser_waits import patient_client  # noqa: E402



def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def trace_file(folder: Path, name: str, shape: TraceShape, **changes) -> str:
    data = {**build_trace(shape), **changes}
    path = folder / name
    path.write_text(json.dumps(data, separators=(",", ":")))
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    from gradio_client import handle_file

    from specviz.lab.public_policy import Policy

    folder = Path(tempfile.mkdtemp(prefix="hostile-report-"))
    one = dict(steps=1, nodes=2, committed=1, text_chars=1, sources=1, foreign_sources=False, curve_points=0,
               curve_top=1, null_timing=False, param_items=1)
    uploads = {  # the cheapest first: on code without the checks the last ones hold the server for minutes
        "middle step's draft time null, then /go_to 1": trace_file(
            folder, "null-timing.json", TraceShape(**{**one, "steps": 3, "null_timing": True})),
        "16,000 foreign sources on a node": trace_file(
            folder, "sources.json", TraceShape(**{**one, "sources": 16_000, "foreign_sources": True})),
        "372-byte cost_curve {sizes: [1, 2000000]}": trace_file(
            folder, "curve.json", TraceShape(**{**one, "curve_points": 2, "curve_top": 2_000_000})),
        "20 KB trace: 2,000 committed tokens of 10,000 '<'": trace_file(
            folder, "big-answer.json", TraceShape(**{**one, "committed": 2_000, "text_chars": 10_000})),
    }
    model = Policy.for_public().default_model
    requests = {
        "seed '²'": ("/step", settings(max_new_tokens=4, model=model, seed="²")),
        "seed of 5,000 digits": ("/step", settings(max_new_tokens=4, model=model, seed="9" * 5_000)),
        "prompt of 15,990 nested brackets": ("/step", settings(
            max_new_tokens=4, model=model, prompt='{"messages": ' + "[" * 15_990 + "]" * 15_990 + "}")),
        "sweep axis datastore_grow=1": ("/sweep", {
            "axis_1": "datastore_grow=1", "axis_2": "", "scope": "page prompt", "category": "code-edit",
            "sweep_tokens": 8, "metric": "speedup", **settings(method="reader", model=model, max_new_tokens=8)}),
    }
    process, url = started()
    client = patient_client(url)
    print(f"server up, {rss_mb(process.pid):.0f} MB resident")
    rows = []

    def timed(what: str, call) -> None:
        started = time.monotonic()
        try:
            value = call()
            answer = json.dumps(value, default=str)
            text = next((v for v in (value if isinstance(value, (list, tuple)) else [value])
                         if isinstance(v, str) and "⚠️" in v), "")
            outcome = text[text.index("⚠️"):][:160] if text else "answered"
            size = len(answer)
        except Exception as error:  # noqa: BLE001 (what the server did is the figure)
            outcome, size = f"{type(error).__name__}: {str(error)[:140]}", 0
        rows.append((what, time.monotonic() - started, size, rss_mb(process.pid), outcome))
        print(f"{what}: {rows[-1][1]:.2f} s, {size:,} bytes answered, {rows[-1][3]:.0f} MB resident: {outcome}",
              flush=True)

    for what, (endpoint, values) in requests.items():
        timed(what, lambda: client.submit(**values, api_name=endpoint).result(timeout=args.timeout))
    for what, path in uploads.items():
        sent = Path(path).stat().st_size
        timed(f"{what} ({sent:,} bytes)",
              lambda: client.submit(handle_file(path), api_name="/upload_trace").result(timeout=args.timeout))
        if "go_to" in what:
            timed("  /go_to 1", lambda: client.submit(1, api_name="/go_to").result(timeout=args.timeout))
        timed("  /accounting", lambda: client.submit(api_name="/accounting").result(timeout=args.timeout))
    body = json.dumps({"data": ["HuggingFaceTB/SmolLM2-360M-Instruct", "bf16"]}).encode()
    request = urllib.request.Request(url + "gradio_api/call/load_model", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")

    def private_by_name():
        try:
            with urllib.request.urlopen(request, timeout=args.timeout) as answer:
                return f"{answer.status} {answer.read()[:120]!r}"
        except urllib.error.HTTPError as error:
            return f"⚠️ {error.code} {error.read()[:160].decode()}"

    timed("POST /gradio_api/call/load_model (private)", private_by_name)
    process.kill()


if __name__ == "__main__":
    main()
