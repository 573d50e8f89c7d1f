"""The speed issue's pieces: lean forward, run modes, the numerics-aware lossless check, the shared
top-k, the warm copy-logit table, the hf-ar peer, the profiler and the random twin."""

import json

import pytest
import torch

from specviz.accept.greedy import greedy_accept
from specviz.accept.verification import TOP_K, LogitTop
from specviz.runtime import modes
from specviz.engine.divergence import classify, recompute_margin, tie_threshold
from specviz.engine.tree_forward import tree_forward
from specviz.runtime.kv import new_cache
from specviz.runtime.loading import load_model
from specviz.engine.session import Session
from specviz.tree.draft_tree import DraftTree
from specviz.tools.random_model import describe, materialise
from test_cli import cli

OPEN_PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a kite."}]
REPEAT_PROMPT = "Write the numbers from 1 to 60, separated by commas."


# ---- lean forward ------------------------------------------------------------------------------------
def _tree(root):
    tree = DraftTree(root)
    a = tree.add_path([5, 6, 7], "retrieval")
    tree.add_path([8, 9], "logits", parent=a[0])
    tree.add_path([10], "model")
    return tree


@torch.inference_mode()
def _stock_path_logits(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0].float()


def test_lean_forward_is_installed_and_matches_stock_on_grouped_heads(tiny_models):
    lm = load_model(tiny_models["same"])  # 4 query heads over 2 key/value heads
    assert lm.lean and lm.decoder is not None
    past = [11, 12, 13, 14, 15]
    cache = new_cache(lm.model.config)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([past]), past_key_values=cache, use_cache=True)
    tree = _tree(16)
    logits = tree_forward(lm, cache, tree, len(past))
    assert cache.get_seq_length() == len(past) + len(tree)
    for path in tree.paths():
        stock = _stock_path_logits(lm.model, past + [tree.tokens[n] for n in path])[len(past):]
        assert torch.allclose(stock, logits[path], atol=1e-5, rtol=0), path


def test_packed_onednn_weights_give_a_row_the_same_result_whatever_the_row_count(lm):
    """oneDNN runs every linear module from a packed copy of its weight (the stock path keeps the dense
    one; with the native kernel the modules still run the prefill), and a row's output does not depend on
    how many rows share the call."""
    from specviz.runtime import fast_linear

    if lm.linear not in ("native", "onednn"):
        pytest.skip(f"this machine runs the {lm.linear} linear kernel")
    linears = [m for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m._specviz_packed.is_mkldnn for m in linears)
    head = lm.model.lm_head
    x = torch.randn(1, 65, head.in_features, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        one_row = head(x[:, :1])
        for rows in (2, 16, 65):
            assert torch.equal(head(x[:, :rows])[:, :1], one_row)
        with fast_linear.stock():
            assert torch.equal(head(x), torch.nn.functional.linear(x, head.weight))
        assert torch.allclose(head(x), torch.nn.functional.linear(x, head.weight), atol=1e-4, rtol=0)


def test_too_little_memory_to_pack_runs_dense_onednn_and_says_so(tiny_models, monkeypatch):
    from specviz.runtime import fast_linear

    monkeypatch.setattr(fast_linear, "_available_memory_bytes", lambda: 1024)
    lm = load_model(tiny_models["same"], linear="onednn")
    if lm.linear != "onednn":
        pytest.skip(f"this machine runs the {lm.linear} linear kernel")
    assert not lm.packed and any("dense weights" in note for note in lm.notes)
    assert not any(hasattr(m, "_specviz_packed") for m in lm.model.modules())
    session = Session(lm, "racer", budget=4).start("Count: one two three one two three")
    session.run(6)
    assert len(session.output_ids) == 6


def test_stock_forward_when_asked(tiny_models, monkeypatch):
    monkeypatch.setenv("SPECVIZ_FORWARD", "stock")
    lm = load_model(tiny_models["same"])
    assert not lm.lean and lm.decoder is None


# ---- modes -------------------------------------------------------------------------------------------
def test_parse_mode_flags_and_unknown_names():
    mode = modes.parse_mode("bf16+compile")
    assert mode.dtype == torch.bfloat16 and mode.compiled and not mode.notes
    assert modes.parse_mode("compile").dtype is None
    for bad in ("turbo", "fp32+bf16", "bf16+warp"):
        fallback = modes.parse_mode(bad)
        assert fallback.dtype is None and not fallback.compiled
        assert len(fallback.notes) == 1 and "default precision, eager" in fallback.notes[0]


def test_modes_the_machine_cannot_run_fall_back_with_a_note(monkeypatch):
    cpu = torch.device("cpu")
    settled = modes.settle(modes.Mode(torch.float16), cpu, torch.float32)
    assert settled.dtype == torch.float32 and "fp16" in settled.notes[0]
    monkeypatch.setattr(modes.shutil, "which", lambda name: None)
    settled = modes.settle(modes.Mode(torch.float32, compiled=True), cpu, torch.float32)
    assert not settled.compiled and "C++ compiler" in settled.notes[0]


def test_load_model_with_unknown_mode_runs_fp32_eager_and_says_so(tiny_models):
    lm = load_model(tiny_models["same"], mode="warp-speed")
    assert lm.mode == "fp32" and not lm.compiled
    assert any("warp-speed" in note for note in lm.notes)


def test_lab_shows_a_mode_fallback_and_keeps_working(lm):
    from specviz.ui.lab import Lab

    lab = Lab()
    lab.apply("", "Say hi.", "racer", 8, {}, mode="warp")
    assert "warp" in lab.message and "eager" in lab.message
    lab.step(4)
    assert lab.session.lm.mode == "fp32" and "**mode** fp32" in lab.counters_markdown()


def test_cli_reports_the_fallback_on_stderr():
    out = cli("profile", "--mode", "turbo", "--sizes", "1,2", "--repeats", "1")
    assert out.returncode == 0, out.stderr
    assert "note:" in out.stderr and "turbo" in out.stderr
    assert "ratio" in out.stdout and "float32" in out.stdout and "stock F.linear ms" in out.stdout
    bad = cli("profile", "--sizes", "1,x")
    assert bad.returncode == 2 and "whole numbers" in bad.stderr and "Traceback" not in bad.stderr


# ---- numerics-aware lossless check -------------------------------------------------------------------
def test_classify_tie_mismatch_lossy_and_identical():
    ref, ref_margins = [1, 2, 3, 4], [5.0, 0.004, 2.0, 2.0]
    assert classify(ref, ref_margins, [1, 2, 3, 4], ref_margins, 0.01).verdict == "yes"
    tie = classify(ref, ref_margins, [1, 9, 3, 4], [5.0, 0.002, 1.0, 1.0], 0.01)
    assert tie.verdict == "tie@1" and tie.position == 1 and tie.token == 9 and tie.reference_token == 2
    assert "numeric tie" in tie.describe(str)
    # the same difference where one run's margin is large is a bug, not numerics
    assert classify(ref, ref_margins, [1, 9, 3, 4], [5.0, 0.5, 1.0, 1.0], 0.01).verdict == "MISMATCH"
    assert classify([1, 2, 3, 4], [5.0] * 4, [1, 9, 3, 4], [5.0] * 4, 0.01).verdict == "MISMATCH"
    assert classify(ref, ref_margins, [1, 9], [5.0, 5.0], 0.01, lossless=False).verdict == "lossy@1"
    assert classify(ref, ref_margins, [1, 2], [5.0, 0.004], 0.01).verdict == "MISMATCH"  # stopped early


def test_session_margins_are_the_targets_top2_margins(lm):
    session = Session(lm, "racer", budget=16).start(OPEN_PROMPT)
    session.run(12)
    assert len(session.margins) == len(session.output_ids) == 12 and min(session.margins) >= 0
    for position in (0, 5, 11):
        again = recompute_margin(lm, session.prompt_ids, session.output_ids, position)
        assert abs(again - session.margins[position]) < 1e-3 * max(1.0, again)


@pytest.mark.slow
def test_bf16_differences_from_ar_are_classified_not_hidden():
    """In bf16 bitwise equality is not promised; every difference must be a tie (both margins small),
    never a MISMATCH."""
    lm16 = load_model(None, mode="bf16")
    threshold = tie_threshold(lm16.dtype)
    for messages in (OPEN_PROMPT, [{"role": "user", "content": "Repeat twice: red, green, blue."}]):
        ar = Session(lm16, "ar").start(messages)
        ar.run(32)
        racer = Session(lm16, "racer", budget=32).start(messages)
        racer.run(32)
        verdict = classify(ar.output_ids, ar.margins, racer.output_ids, racer.margins, threshold).verdict
        assert verdict == "yes" or verdict.startswith("tie@"), verdict


# ---- shared top-k --------------------------------------------------------------------------------------
def test_shared_top_k_gives_exact_ranks_inside_and_outside_it():
    torch.manual_seed(0)
    tree = DraftTree(0)
    a = tree.add(0, 3, "logits")
    tree.add(0, 40, "logits")
    tree.add(a, 7, "retrieval")
    logits = torch.randn(len(tree), 100)
    logits[0, 3] = 10.0  # node a is the argmax under the root
    verification = greedy_accept(tree, logits)
    assert verification.top.values.shape == (len(tree), TOP_K)
    for node in range(1, len(tree)):
        row = logits[tree.parents[node]]
        assert verification.target_ranks[node] == int((row > row[tree.tokens[node]]).sum())
    assert LogitTop.of(logits).argmax == logits.argmax(-1).tolist()


# ---- warm copy-logit table ---------------------------------------------------------------------------
def test_warm_table_drafts_more_and_stays_lossless(lm):
    ar = Session(lm, "ar").start(OPEN_PROMPT)
    ar.run(24)
    sizes = {}
    for warm in (0, 1):
        session = Session(lm, "racer-logits", {"warm_table": warm}, budget=16).start(OPEN_PROMPT)
        session.run(24)
        assert session.output_ids == ar.output_ids
        sizes[warm] = sum(len(r.nodes) - 1 for r in session.records) / len(session.records)
        seen = session.method.stages[0].table.filled
        if warm:
            assert seen > 1000  # the seed's rows (the corpus holds over a thousand distinct tokens)
    assert sizes[1] > sizes[0]


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


def test_random_twin_has_the_config_and_tokenizer_not_the_weights(tiny_models, tmp_path):
    folder = describe(tiny_models["same"], str(tmp_path / "twin"))
    assert (folder / "config.json").is_file() and not (folder / "model.safetensors").exists()
    materialise(str(folder), seed=3)
    twin = load_model(str(folder))
    original = load_model(tiny_models["same"])
    assert twin.model.config.num_hidden_layers == original.model.config.num_hidden_layers
    assert twin.tokenizer.get_vocab() == original.tokenizer.get_vocab()
    assert not torch.equal(twin.model.lm_head.weight, original.model.lm_head.weight)


def test_planner_answers_an_empty_tree_as_its_general_path_would():
    """No draft node (a silent source, no budget left): plain decoding, priced from the curve directly."""
    from specviz.engine.costmodel import CostModel
    from specviz.engine.planner import AcceptanceModel, OnlineCost, best_first, plan

    cost = OnlineCost(CostModel(sizes=[1, 2, 8], ms=[10.0, 12.0, 24.0], context_len=512, model="m",
                                device="cpu", dtype="float32", threads=2))
    for _ in range(4):
        cost.observe(1, 12.5)  # the correction moves the one-token cost to 12.5 ms
    kept, cut, curve = plan(DraftTree(1), AcceptanceModel(), cost, 64, draft_ms=0.5)
    assert kept == [] and cut.kept == cut.offered == 0
    assert cut.expected_tokens_per_s == round(1000 / (0.5 + 12.5), 2)
    assert curve == [0.0]
    # the general path, on a tree whose one node does not pay for its verify cost, decides the same
    tree = DraftTree(1)
    tree.add(0, 5, "logits", prior=0.05)
    kept, general, _ = plan(tree, AcceptanceModel(), cost, 64, draft_ms=0.5)
    assert kept == [] and general.expected_tokens_per_s == cut.expected_tokens_per_s
    assert best_first(DraftTree(1), AcceptanceModel(), 64)[0] == []


def test_a_cost_band_measured_during_a_burst_expires_and_is_priced_from_the_bands_still_measured():
    from specviz.engine.costmodel import CostModel
    from specviz.engine.planner import STALE_AFTER, OnlineCost

    curve = CostModel(sizes=[1, 2, 8, 32], ms=[10.0, 12.0, 24.0, 40.0], context_len=512, model="m",
                      device="cpu", dtype="float32", threads=2)
    cost = OnlineCost(curve)
    for _ in range(3):  # trees of 8 measured 4x slower than the curve (a burst of load) ...
        cost.observe(8, 96.0)
    for _ in range(3):  # ... one-token steps at the curve's own cost
        cost.observe(1, 10.0)
    assert cost.cost_ms(8) == 96.0 and cost.costs_ms(8)[7] == 96.0
    saved = cost.checkpoint()
    for _ in range(STALE_AFTER - 3):  # the band still counts until STALE_AFTER forwards went by without it
        cost.observe(1, 11.0)
    assert cost.cost_ms(8) == 96.0
    cost.observe(1, 11.0)
    assert cost.cost_ms(8) == 24.0 * 1.1 and cost.costs_ms(8)[7] == 24.0 * 1.1  # the one-token band's correction
    assert cost.cost_ms(32) == 40.0 * 1.1
    cost.rollback(saved)
    assert cost.cost_ms(8) == 96.0 and cost.costs_ms(8)[7] == 96.0 and cost.checkpoint() == saved


def test_a_cost_curve_measured_during_a_burst_of_load_is_measured_again_and_never_stored(tiny_models, tmp_path,
                                                                                        monkeypatch):
    """The curve a burst of load left here once (2 tokens dearer than 4, 48 dearer than 64): it was saved
    and shaped every planner decision since. Now such a curve is measured again, and one that stays so is
    used for the session but not stored; a stored one is not read."""
    from specviz.engine import costmodel

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    lm = load_model(tiny_models["same"])
    sizes = (1, 2, 4, 8, 48, 64)
    skewed, clean = [26.3, 42.5, 18.4, 22.3, 576.4, 94.9], [14.2, 14.9, 16.0, 19.2, 52.8, 62.3]
    assert not costmodel.plausible(skewed) and costmodel.plausible(clean)
    assert costmodel.plausible([34.5, 53.1, 52.2, 50.6])  # fp32 F.linear at 1, 2, 4, 8 rows: 5% dips happen
    measured = [skewed, clean]
    monkeypatch.setattr(costmodel, "_measure", lambda *args: measured.pop(0))
    assert costmodel.calibrate(lm, sizes=sizes).ms == clean and measured == []
    assert costmodel.load(lm).ms == clean
    measured.extend([skewed] * costmodel.CALIBRATION_ATTEMPTS)
    costmodel.stored_path(lm).unlink()
    assert costmodel.calibrate(lm, sizes=sizes).ms == skewed and measured == []
    assert not costmodel.stored_path(lm).exists()
    stored = costmodel.CostModel(sizes=list(sizes), ms=skewed, context_len=512, model=lm.name, device="cpu",
                                 dtype="float32", threads=2)
    costmodel.stored_path(lm).write_text(json.dumps(costmodel.asdict(stored)))
    assert costmodel.load(lm) is None


def test_calibration_times_every_size_in_turn(tiny_models, tmp_path, monkeypatch):
    """Sizes take turns, so a burst lands in one round of each size; the medians leave it out."""
    from specviz.engine import costmodel

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    lm = load_model(tiny_models["same"])
    order = []
    real_forward = costmodel.tree_forward

    def counted(model, cache, tree, past):
        order.append(len(tree))
        return real_forward(model, cache, tree, past)

    monkeypatch.setattr(costmodel, "tree_forward", counted)
    ms = costmodel._measure(lm, (1, 4, 8), 32, 3)
    assert order == [1, 4, 8] * 4 and len(ms) == 3 and all(t > 0 for t in ms)


def test_the_planner_drafts_again_after_trees_were_measured_during_a_burst(lm):
    """Trees measured 20x dearer than the curve: the planner refuses them, until their bands expire."""
    from specviz.engine.planner import COST_BANDS, STALE_AFTER

    session = Session(lm, "racer")
    cost = session.online_cost
    for band in COST_BANDS:  # one-token steps at the curve's cost, trees at 20x
        for _ in range(3):
            cost.observe(band, (1 if band == 1 else 20) * cost.curve.cost_ms(band))
    session.start(REPEAT_PROMPT)
    session.run(100)
    kept = [len(record.nodes) - 1 for record in session.records]
    # refused while those bands are trusted (the smallest expires first: its samples are the oldest) ...
    assert len(kept) > STALE_AFTER + 2 and not any(kept[:8])
    assert any(kept[STALE_AFTER:])  # ... and tried again once they expired


# ---- per-source calibration of the planner --------------------------------------------------------
def test_calibration_is_per_source_and_stops_paying_for_broken_promises():
    from specviz.engine.costmodel import CostModel
    from specviz.engine.planner import AcceptanceModel, plan

    def tree():
        t = DraftTree(1)
        a = t.add(0, 5, "logits", prior=0.7)
        t.add(a, 6, "logits", prior=0.7)
        r = t.add(0, 7, "retrieval", prior=0.9)
        t.add(r, 8, "retrieval", prior=0.9)
        return t

    # every draft node costs a fifth of a one-token step
    cost = CostModel(sizes=[1, 2, 8], ms=[10.0, 12.0, 24.0], context_len=512, model="m", device="cpu",
                     dtype="float32", threads=2)
    model = AcceptanceModel()
    kept_before, _, _ = plan(tree(), model, cost, 8)
    assert set(kept_before) == {1, 2}  # the logits chain promises most (and takes the root's first share)
    for _ in range(6):  # the logits nodes always fail, the retrieval chain is always accepted
        t = tree()
        model.observe_step(t, model.node_chances(t), ["root", "rejected", "unreached", "accepted", "accepted"])
    assert model.calibration("logits") < 0.5 < 1.0 < model.calibration("retrieval")
    t = tree()
    kept_after, _, _ = plan(t, model, cost, 8)
    assert set(kept_after) == {3, 4} and all(t.sources[n] == {"retrieval"} for n in kept_after)
    saved = model.checkpoint()
    model.observe_step(t, model.node_chances(t), ["root", "accepted", "accepted", "rejected", "unreached"])
    model.rollback(saved)
    assert model.checkpoint() == saved
