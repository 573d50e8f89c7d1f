"""`dev roofline` (benches/roofline.py, runtime/native/roofline_probe.cc): the bound each forward is held to, the work a
forward counts, and the probes' figures, without timing anything against a target (that is the command's job)."""

import math

import pytest
from conftest import native_library_or_skip

from specviz.benches import roofline
from specviz.runtime.native import roofline_probe
from specviz.runtime.native.roofline_probe import Roofline

MACHINE = Roofline(read_gbs_one_thread=20.0, read_gbs=30.0, fma_gflops_one_thread=100.0, fma_gflops=200.0,
                   threads=2, vector_floats=16)


def test_the_bound_is_bytes_for_few_rows_and_flops_for_many():
    # 600 MB at 30 GB/s: 20 ms; 1 GFLOP at 200 GFLOP/s: 5 ms
    assert MACHINE.bound_ms(600e6, 1e9) == pytest.approx((20.0, "bytes"))
    # 16 GFLOP: 80 ms, past the 20 ms of the bytes
    assert MACHINE.bound_ms(600e6, 16e9) == pytest.approx((80.0, "flops"))


def test_a_forwards_work_counts_every_weight_once_and_its_attention(lm):
    config = lm.model.config
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    weights = layers * (hidden * (2 * hidden + 2 * kv) + 3 * hidden * inter) + config.vocab_size * hidden
    one, sixteen = roofline.forward_work(lm, 1, 512), roofline.forward_work(lm, 16, 512)
    cache = lambda keys: layers * 2 * kv * keys * 4  # noqa: E731
    # 511 cache entries (the context but its last token, the root) and the tree's own
    assert one.bytes_read == 4 * weights + cache(512)
    assert sixteen.bytes_read == 4 * weights + cache(527)
    assert sixteen.flops == 2 * weights * 16 + layers * config.num_attention_heads * 16 * 527 * head_dim * 4
    # 0.27 GFLOP a token for 135M weights, and 0.03 for its attention over 512 keys
    assert 0.29e9 < one.flops < 0.32e9


def test_the_probes_measure_this_machine():
    native_library_or_skip(roofline_probe, "roofline probe")
    measured = roofline_probe.measure(threads=2, repeats=1, read_bytes=8 * 2**20, fma_iterations=200_000)
    figures = (measured.read_gbs_one_thread, measured.read_gbs, measured.fma_gflops_one_thread, measured.fma_gflops)
    assert all(math.isfinite(x) and x > 0 for x in figures), measured
    assert measured.vector_floats in (4, 8, 16)


def test_the_report_sets_each_forward_against_its_bound_and_judges_the_targets(lm, monkeypatch):
    monkeypatch.setattr(roofline, "measure", lambda threads: MACHINE)
    report = roofline.measure_report(lm, [2, 8], context_len=32, repeats=1)
    assert [r.tokens for r in report.rows] == [1, 2, 8]  # the one-token forward is always measured
    for row in report.rows:
        work = roofline.forward_work(lm, row.tokens, 32)
        assert row.bound_ms == pytest.approx(MACHINE.bound_ms(work.bytes_read, work.flops)[0])
        assert row.fraction == pytest.approx(row.bound_ms / row.ms)
        assert row.peak_share == pytest.approx(work.flops / row.ms / 1e6 / MACHINE.fma_gflops)
    assert report.rows[0].x_one_token == 1.0
    [judged] = roofline.targets(report)  # of the targets, only 8 tokens' is in this report
    assert judged.startswith("8 tokens at most 1.25x one token:") and judged.endswith(("met", "missed"))
    text = roofline.format_report(lm, report)
    assert "streaming read: 20.0 GB/s on 1 thread, 30.0 GB/s on 2" in text and "target: 8 tokens" in text
