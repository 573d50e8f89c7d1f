"""bench: the hf-ar peer runs beside ours and every difference from ar gets a verdict."""

import json

from test_cli import cli

OPEN_PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a kite."}]


# ---- peers and tools -----------------------------------------------------------------------------------
def test_bench_has_hf_ar_and_classifies_every_difference(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "a", "category": "open", "messages": OPEN_PROMPT}))
    report_path = tmp_path / "report.json"
    out = cli("bench", "--suite", str(suite), "--methods", "hf-ar,racer", "--max-new-tokens", "16",
              "--json", str(report_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(report_path.read_text())
    assert report["methods"] == ["ar", "hf-ar", "racer"]
    verdicts = {r["method"]: r["verdict"] for r in report["prompts"]}
    assert verdicts["racer"] == "yes"  # fp32, one forward for every method of ours: identical
    # transformers' stock forward is another kernel: identical, or a tie, never a mismatch
    assert verdicts["hf-ar"] == "yes" or verdicts["hf-ar"].startswith("tie@")
