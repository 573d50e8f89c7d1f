"""The draft head: the target's features, the head's file and its refusals, the drafter's tree and its
bookkeeping, every method that drafts with it staying lossless (greedy and sampled), training end to end on
a tiny target in seconds, and the fallbacks when the head cannot draft."""

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from specviz.accept.position_noise import PositionNoise
from specviz.accept.sampling import SamplingSettings, coupled_accept
from specviz.drafters.head import HeadDrafter
from specviz.engine.run import run_method
from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.engine.tree_forward import tree_forward
from specviz.errors import SpecvizError
from specviz.records.notes import ReSpecNote
from specviz.runtime import draft_head
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.draft_head import (DraftHead, HeadNetwork, HeadRecord, MissingHead, load_head,
                                        target_identity, target_shape)
from specviz.runtime.kv import new_cache
from specviz.runtime.loading import load_model
from specviz.runtime.draft_model_spec import head_for, resolve_draft
from specviz.training.head_corpus import (SuiteGuard, guarded, python_code, python_reference, shipped_answers,
                                      usable_request)
from specviz.training.train_head import TrainConfig, generate_answers, self_instruct, train, unrolled_mask
from specviz.tree.draft_tree import ROOT, DraftTree

from test_sampling import chi_square_p

SUITE = {i.id: i for i in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl")}
TINY_CONFIG = TrainConfig(draft_vocab=384, intermediate=64, unroll=2, epochs=1, seq_len=80, batch=4,
                          docs_chars=4000, code_chars=2000, generate_per_prompt=0, questions=0, requests_per_prompt=0,
                          bf16=False)


def random_head(lm, draft_vocab: int = 2048, intermediate: int = 128, seed: int = 0) -> DraftHead:
    """An untrained head (random layer) over the draft_vocab lowest token ids and the end tokens."""
    torch.manual_seed(seed)
    ids = torch.tensor(sorted(set(range(draft_vocab - len(lm.eos_ids))) | set(lm.eos_ids)))
    shape = target_shape(lm, intermediate, len(ids))
    return DraftHead(lm, HeadNetwork(lm, shape, ids), HeadRecord(target_identity(lm), shape))


@pytest.fixture(scope="module")
def tiny(tiny_models):
    return load_model(tiny_models["same"])


@pytest.fixture(scope="module")
def tiny_head_file(tiny, tmp_path_factory):
    path = tmp_path_factory.mktemp("head") / "tiny.safetensors"
    report = train(tiny, TINY_CONFIG, out=path)
    return path, report


@pytest.fixture(scope="module")
def head(lm):
    return random_head(lm)


# ---- the target's features ----------------------------------------------------------------------------
def test_features_are_what_the_head_reads_and_leave_the_logits_alone(lm):
    ids = lm.tokenizer("The quick brown fox jumps over the lazy dog near the river bank", return_tensors="pt").input_ids[0]
    ids = ids.tolist()
    caches = [new_cache(lm.model.config) for _ in range(2)]
    for cache in caches:
        causal_forward(lm, cache, ids[:-4])
    tree = DraftTree(ids[-4])
    chain = tree.add_path(ids[-3:], "retrieval")
    tree.add(ROOT, 11, "logits")
    plain = tree_forward(lm, caches[0], tree, len(ids) - 4)
    logits, features = tree_forward(lm, caches[1], tree, len(ids) - 4, features=True)
    assert torch.equal(plain, logits)  # asking for features changes nothing the verifier reads
    assert features.shape == (len(tree), lm.model.config.hidden_size)
    # the features are the base model's last hidden state, and the head of the model reads them
    with torch.inference_mode():
        reference = lm.model.get_decoder()(input_ids=torch.tensor([ids])).last_hidden_state[0]
    assert torch.allclose(features[[ROOT, *chain]], reference[-4:], atol=2e-3, rtol=1e-3)
    with torch.inference_mode():
        recomputed = features @ lm.model.get_output_embeddings().weight.T
    assert torch.allclose(recomputed, logits, atol=2e-2, rtol=1e-3)
    # the prefill gives the same features as the tree forward
    cache = new_cache(lm.model.config)
    _, prefill = causal_forward(lm, cache, ids, features=True)
    assert torch.allclose(prefill[-4:], reference[-4:], atol=2e-3, rtol=1e-3)


# ---- the drafter ------------------------------------------------------------------------------------------
def test_head_tree_grows_by_path_chance_within_the_draft_vocabulary_and_budget(lm, head):
    session = Session(lm, "unified", {"model_stage": "on", "head_breadth": 3, "head_expand": 2, "head_depth": 4},
                      budget=20, draft=head).start(SUITE["open-poem"].messages)
    drafter = session.method.stages[0].inner
    assert isinstance(drafter, HeadDrafter)
    drafter.min_path_chance = 0.0
    tree = drafter.propose(session.context, 20)
    assert 0 < tree.num_drafted <= 20
    allowed = set(head.draft_ids_list)
    assert all(tree.tokens[n] in allowed for n in range(1, len(tree)))
    for n in range(1, len(tree)):
        meta = tree.meta[n]["model"]
        assert 0 < meta["draft_prob"] <= 1 and meta["prior"] == pytest.approx(meta["draft_prob"], abs=1e-6)
        if tree.parents[n] != ROOT:  # a child's path chance never exceeds its parent's
            assert tree.score(n) <= tree.score(tree.parents[n]) + 1e-9
    assert len(tree.children(ROOT)) <= 3 and tree.max_depth() <= 4
    assert len(drafter.forward_ms) == 4  # the feed, then one forward per level below the first


def test_head_cache_holds_the_target_features_of_the_committed_context(lm, head):
    """After steps that accepted other sources' drafts and steps where the head did not draft, the head's
    entries are those of one fresh feed of the committed context with the target's features."""
    session = Session(lm, "unified", {"model_stage": "on", "head_depth": 3}, budget=24,
                      draft=head).start(SUITE["code-rename"].messages)
    gated = session.method.stages[0]
    for i in range(6):
        gated.gate.mode = "off" if i in (2, 3) else "on"  # two steps without the head
        session.step()
    assert sum(len(r.accepted_tokens) for r in session.records) > 6  # drafts were accepted
    drafter = gated.inner
    context = session.context
    drafter.propose(context, 8)  # feeds what it missed, then drafts
    fresh = HeadDrafter(head, 2, 2, 2, 8)
    cache = new_cache(lm.model.config)
    features = torch.cat([causal_forward(lm, cache, context[i:min(i + 512, len(context) - 1)], features=True)[1]
                          for i in range(0, len(context) - 1, 512)])
    fresh.prefill_chunk(context, 0, None, features)
    fresh.propose(context, 8)
    committed = len(context) - 1
    for mine, theirs in zip(drafter.cache.layers, fresh.cache.layers):
        assert torch.allclose(mine.keys[:, :, :committed], theirs.keys[:, :, :committed], atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("method,params", [
    ("unified", {"model_stage": "on"}), ("reader", {}), ("respec", {"fallback": "model"})])
@pytest.mark.parametrize("item", ["code-rename", "open-story", "math-apples"])
def test_every_method_that_drafts_with_the_head_is_lossless(lm, head, method, params, item):
    prompt = SUITE[item].messages
    reference = Session(lm, "ar").start(prompt)
    reference.run(32)
    session = Session(lm, method, params, budget=16, draft=head).start(prompt)
    session.run(32)
    assert session.output_ids == reference.output_ids
    drafted = sum(r.allocation.get("model", 0) for r in session.records)
    assert drafted > 0
    if method == "respec":
        assert any(r.note(ReSpecNote).drafted_by == "model" for r in session.records)
    model_nodes = [n for r in session.records for n in r.nodes if "model" in n.sources]
    assert all(n.draft_prob is not None for n in model_nodes)  # shown in the tree as model nodes are


def test_rollback_leaves_the_head_drafter_as_it_was(lm, head, monkeypatch):
    session = Session(lm, "unified", {"model_stage": "on"}, budget=16, draft=head).start(SUITE["open-advice"].messages)
    session.run(6)
    drafter = session.method.stages[0].inner
    before = (drafter.upto, drafter.known, drafter.cache.get_seq_length())
    pending = drafter.pending.clone()

    def failing(*args, **kwargs):  # the verify forward fails after the head drafted
        raise RuntimeError("boom")
    with monkeypatch.context() as patch:
        patch.setattr("specviz.engine.session.verify_tree", failing)
        with pytest.raises(RuntimeError, match="boom"):
            session.step()
    assert (drafter.upto, drafter.known, drafter.cache.get_seq_length()) == before
    assert torch.equal(drafter.pending, pending)
    session.run(12)
    reference = Session(lm, "ar").start(SUITE["open-advice"].messages)
    reference.run(12)
    assert session.output_ids == reference.output_ids


@pytest.mark.parametrize("method,params", [
    ("unified", {"model_stage": "on"}), ("reader", {}), ("respec", {"fallback": "model"})])
def test_sampled_runs_with_the_head_emit_the_seeds_draws(lm, head, method, params):
    """Sampled, every method drafting with the head emits ar's tokens for the seed (seeds that repeat)."""
    prompt = SUITE["open-story"].messages
    sampling = SamplingSettings(temperature=0.8, top_p=0.95, seed=5)
    reference = Session(lm, "ar", sampling=sampling).start(prompt)
    reference.run(24)
    session = Session(lm, method, params, budget=16, draft=head, sampling=sampling).start(prompt)
    session.run(24)
    assert session.output_ids == reference.output_ids
    assert sum(r.allocation.get("model", 0) for r in session.records) > 0


def test_sampled_head_drafts_are_q_draws_with_the_seeds_noise_and_keep_the_target_distribution(lm, head):
    """The head's first child of a node is its q's draw with the seed's noise at the child's position; over
    many seeds the lossless rule's first two tokens on the head's trees follow the target's distribution."""
    settings = SamplingSettings(temperature=1.0)
    session = Session(lm, "unified", {"model_stage": "on", "head_breadth": 3, "head_expand": 2, "head_depth": 2},
                      budget=12, draft=head, sampling=settings).start(SUITE["open-poem"].messages)
    drafter = session.method.stages[0].inner
    drafter.min_path_chance = 0.0
    context = session.context
    checkpoint = drafter.checkpoint()
    tree = drafter.propose(context, 12)
    root_position = len(context) - 1
    assert tree.max_depth() == 2 and set(tree.draft_dists) >= {ROOT}
    for node, q in tree.draft_dists.items():
        first = tree.children(node)[0]
        assert tree.tokens[first] == drafter.sampler[1].draw(q.double(), root_position + tree.depths[node] + 1)
        assert set(q.nonzero().flatten().tolist()) <= set(head.draft_ids_list)
    # a target that puts real mass on the head's drafts: p(root) over 6 tokens, p(child) over 5
    first = list(dict.fromkeys([tree.tokens[c] for c in tree.children(ROOT)] + [7, 8, 9]))
    rng = np.random.default_rng(0)
    p_first = rng.dirichlet(np.ones(len(first)))
    second = [11, 12, 13, 14, 15]
    p_second = rng.dirichlet(np.ones(len(second)))
    trials, counts_first, counts_second = 1500, np.zeros(len(first)), {}
    for seed in range(trials):
        drafter.rollback(checkpoint)
        drafter.sampler = (settings, PositionNoise(seed))
        tree = drafter.propose(context, 12)
        logits = torch.full((len(tree), lm.vocab_size), -30.0)
        logits[ROOT, first] = torch.log(torch.tensor(p_first, dtype=torch.float32))
        for node in range(1, len(tree)):
            logits[node, second] = torch.log(torch.tensor(p_second, dtype=torch.float32))
        out = coupled_accept(tree, logits, settings, PositionNoise(seed), root_position).accepted_tokens
        counts_first[first.index(out[0])] += 1
        if len(out) > 1:
            counts_second.setdefault(out[0], np.zeros(len(second)))[second.index(out[1])] += 1
    assert chi_square_p(counts_first, p_first) > 1e-3
    for token, seen in counts_second.items():
        if seen.sum() >= 200:
            assert chi_square_p(seen, p_second) > 1e-3



def test_the_planner_plans_sampled_head_trees_under_the_seeded_rule_and_the_standard_rule_repeats(lm, head):
    """Seeded (the default), any cut is safe: budget=auto plans the head's sampled trees and the output is
    still ar's for the seed. Standard: the head offers q's top-k (no draws, so the planner cuts those too),
    and the session's coins are seeded (the same seed and tree repeat their tokens)."""
    prompt = SUITE["open-story"].messages
    sampling = SamplingSettings(temperature=0.8, top_p=0.95, seed=3)
    reference = Session(lm, "ar", sampling=sampling).start(prompt)
    reference.run(16)
    seeded = Session(lm, "unified", {"model_stage": "on"}, draft=head, sampling=sampling).start(prompt)
    seeded.run(16)
    assert seeded.output_ids == reference.output_ids
    assert all(r.plan.cut is not None for r in seeded.records)
    params = {"model_stage": "on", "acceptance": "standard"}
    planned = Session(lm, "unified", params, draft=head, sampling=sampling).start(prompt)
    planned.run(8)
    assert all(r.plan.cut is not None for r in planned.records)
    # budget=auto cuts by measured time, so only a fixed tree repeats the coins' tokens
    standard = [Session(lm, "unified", params, budget=16, draft=head, sampling=sampling).start(prompt)
                for _ in range(2)]
    for session in standard:
        session.run(16)
    assert standard[0].output_ids == standard[1].output_ids
    drafter = standard[0].method.stages[0].inner
    assert not drafter.draw_first
    tree = drafter.propose(standard[0].context, 16)
    assert tree.num_drafted > 0 and not tree.has_draws()
    for node, q in tree.draft_dists.items():
        children = {tree.tokens[c] for c in tree.children(node)}
        assert children <= set(q.topk(drafter.breadth).indices.tolist())   # q's best: nothing drawn


# ---- the file and its refusals -----------------------------------------------------------------------------
def test_tiny_head_trains_in_seconds_and_loads(tiny, tiny_head_file):
    path, report = tiny_head_file
    assert path.is_file() and report.steps > 0 and report.train_tokens > 1000
    assert report.conversations["answers"] > 50 and report.dropped_by_guard == 0
    assert len(report.top1_by_depth) == TINY_CONFIG.unroll
    head = load_head(tiny, path)
    assert head.record.target.name == tiny.name and head.record.shape.intermediate == 64
    assert len(head.draft_ids_list) == 384 and set(tiny.eos_ids) <= set(head.draft_ids_list)
    assert head.record.training["report"]["steps"] == report.steps
    prompt = [{"role": "user", "content": "Name three colours."}]
    reference = Session(tiny, "ar").start(prompt)
    reference.run(16)
    session = Session(tiny, "unified", {"model_stage": "on"}, budget=12, draft=head).start(prompt)
    session.run(16)
    assert session.output_ids == reference.output_ids


def _rewritten(path: Path, out: Path, **changes) -> Path:
    """A copy of a head file whose header has record fields changed (target=..., version=...)."""
    from safetensors.torch import load_file, save_file

    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        record = json.loads(f.metadata()["specviz"])
    for key, value in changes.items():
        if isinstance(value, dict):
            record[key].update(value)
        else:
            record[key] = value
    save_file(load_file(str(path)), str(out), metadata={"specviz": json.dumps(record)})
    return out


@pytest.mark.parametrize("damage,message", [
    ("garbage", "corrupt or not a draft head"),
    ("truncated", "corrupt or not a draft head"),
    ("newer", "newer than this specviz reads"),
    ("older", "old format"),
    ("other-target", "trained for another model"),
    ("other-vocabulary", "another vocabulary"),
    ("missing-weights", "is corrupt"),
    ("nan-weights", "is corrupt"),
])
def test_a_bad_head_file_is_refused_with_a_message(tiny, tiny_head_file, tmp_path, damage, message):
    from safetensors.torch import load_file, save_file

    path = tiny_head_file[0]
    bad = tmp_path / "bad.safetensors"
    if damage == "garbage":
        bad.write_bytes(b"not a head at all" * 100)
    elif damage == "truncated":
        bad.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    elif damage == "newer":
        _rewritten(path, bad, version=draft_head.FORMAT_VERSION + 1)
    elif damage == "older":
        _rewritten(path, bad, version=draft_head.FORMAT_VERSION - 1)
    elif damage == "other-target":
        _rewritten(path, bad, target={"probe": [0.5] * draft_head.PROBE_VALUES, "name": "some-other-model"})
    elif damage == "other-vocabulary":
        _rewritten(path, bad, target={"vocab_sha256": "0" * 64})
    else:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata()
        tensors = load_file(str(path))
        name = next(k for k in tensors if k.startswith("body.model.layers.0.mlp"))
        if damage == "missing-weights":
            del tensors[name]
        else:
            tensors[name][0, 0] = float("nan")
        save_file(tensors, str(bad), metadata=metadata)
    with pytest.raises(SpecvizError, match=message):
        load_head(tiny, bad)
    missing = head_for(tiny, str(bad))
    assert isinstance(missing, MissingHead) and message.split()[0] in missing.reason


def test_a_head_for_another_target_is_refused(lm, tiny_head_file):
    with pytest.raises(SpecvizError, match="trained for another model"):
        load_head(lm, tiny_head_file[0])


def test_a_head_for_another_vocabulary_is_refused(tiny_models, tiny_head_file):
    other = load_model(tiny_models["other"])
    with pytest.raises(SpecvizError, match="another vocabulary"):
        load_head(other, tiny_head_file[0])


@pytest.mark.parametrize("method,params", [
    ("unified", {"model_stage": "on"}), ("reader", {}), ("respec", {"fallback": "model"})])
def test_without_a_usable_head_the_copy_logit_tree_drafts_and_the_method_says_why(lm, method, params):
    missing = MissingHead("The draft head file 'x' is corrupt: train it with `python -m specviz train-head`.")
    prompt = SUITE["code-guard"].messages
    reference = Session(lm, "ar").start(prompt)
    reference.run(24)
    session = Session(lm, method, params, budget=16, draft=missing).start(prompt)
    session.run(24)
    assert session.output_ids == reference.output_ids
    assert any("is corrupt" in w and "copy-logit" in w for w in session.method.warnings)
    assert not any(r.allocation.get("model") for r in session.records)
    assert any(r.allocation.get("logits") for r in session.records)
    assert session.trace().params["draft_model"] == missing.name


def test_the_head_is_the_default_draft_model_once_trained(tiny, tiny_head_file, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HEADS", str(tmp_path))
    loader = lambda name: pytest.fail("nothing to load")  # noqa: E731
    assert resolve_draft(tiny, "", loader) is None          # no head yet: the target's own weights
    missing = resolve_draft(tiny, "head", loader)
    assert isinstance(missing, MissingHead) and "No draft head" in missing.reason and "train-head" in missing.reason
    target = draft_head.head_path(tiny)
    target.write_bytes(tiny_head_file[0].read_bytes())
    assert isinstance(resolve_draft(tiny, "", loader), DraftHead)
    assert isinstance(resolve_draft(tiny, "head", loader), DraftHead)
    assert resolve_draft(tiny, "self", loader) is None
    target.write_bytes(b"broken")
    assert isinstance(resolve_draft(tiny, "", loader), MissingHead)  # a broken head: a message, no crash


def test_rapid_with_the_head_drafts_with_the_target_weights_and_says_so(lm, head):
    session = Session(lm, "rapid", {"gamma": 4}, budget=8, draft=head).start(SUITE["open-poem"].messages)
    session.run(8)
    assert any("draft head" in w for w in session.method.warnings)


# ---- training pieces ------------------------------------------------------------------------------------
def test_the_suite_guard_drops_benchmark_text_and_keeps_the_shipped_text():
    guard = SuiteGuard()
    shipped = shipped_answers() + python_reference(50_000) + python_code(20_000)
    kept, dropped = guarded(shipped, guard)
    assert dropped == 0 and len(kept) == len(shipped) > 150
    suite_text = SUITE["sum-lighthouse"].messages[-1]["content"]
    heldout = load_suite(Path(__file__).parent.parent / "assets" / "heldout.jsonl")
    document = (Path(__file__).parent.parent / "assets" / heldout[-1].document).read_text()
    leaky = [replace(shipped[0], answer=shipped[0].answer + " " + suite_text[100:220]),
             replace(shipped[1], answer=document[500:700])]
    assert guarded(leaky, guard) == ([], 2)


def test_the_unrolled_mask_is_the_drafting_view():
    n = 5
    for step in range(3):
        visible = unrolled_mask(n, step)
        for t in range(step, n):
            row = visible[t].reshape(step + 1, n)
            assert row[0].nonzero().flatten().tolist() == list(range(0, t - step + 1))
            for j in range(1, step + 1):
                assert row[j].nonzero().flatten().tolist() == [t - step + j]


def test_the_target_writes_answers_to_train_on_with_their_features(tiny):
    """Batched generation: seeded, each answer ends at its end token, and its features are the ones a plain
    forward of prompt and answer gives (left padding changes nothing)."""
    config = replace(TINY_CONFIG, generate_tokens=6, generate_batch=2)
    prompts = ["Say hello.", "Count to three, then stop counting.", "Hi"]
    for temperature in (0.0, 0.9):
        answers = generate_answers(tiny, prompts, config, "test", temperature, seed=3)
        again = generate_answers(tiny, prompts, config, "test", temperature, seed=3)
        assert len(answers) == 3 and all(source == "test" for source, _ in answers)
        assert [s.ids.tolist() for _, s in answers] == [s.ids.tolist() for _, s in again]
        for _, s in answers:
            answer = s.ids[s.answer_from + 1:].tolist()
            assert 1 <= len(answer) <= 6 and not any(t in tiny.eos_ids for t in answer[:-1])
            with torch.inference_mode():
                plain = tiny.model.get_decoder()(input_ids=s.ids[None]).last_hidden_state[0]
            assert torch.allclose(s.features[:-1], plain[:-1], atol=1e-4, rtol=1e-3)
    greedy = generate_answers(tiny, prompts[:1], config, "test", 0.0, seed=0)[0][1]
    reference = run_method(tiny, "ar", prompt_ids=greedy.ids[:greedy.answer_from + 1].tolist(), max_new_tokens=6)
    answer = greedy.ids[greedy.answer_from + 1:].tolist()
    assert answer == list(reference.output_ids)[:len(answer)]


def test_a_row_that_ends_leaves_the_batch_and_the_others_write_on_unchanged(tiny, monkeypatch):
    """Rows that wrote their end token leave the batch (and the cache): every answer and its features are what
    the same prompt gets alone in a batch of one."""
    from specviz.training.train_head import _generate

    prompts = [tiny.tokenizer.encode(p) for p in ("Say hello.", "Count to three, then stop.", "Hi there", "Go")]
    alone = [_generate(tiny, [p], 8, 0.0, 0, 1)[0] for p in prompts]
    # an end token that some answers write early and others never: rows leave the batch at different steps
    written = [t for _, answer, _ in alone for t in answer[1:4]]
    monkeypatch.setattr(tiny, "eos_ids", set(tiny.eos_ids) | {written[0], written[4]})
    alone = [_generate(tiny, [p], 8, 0.0, 0, 1)[0] for p in prompts]
    together = _generate(tiny, prompts, 8, 0.0, 0, 4)
    lengths = {len(answer) for _, answer, _ in together}
    assert len(lengths) > 1 and min(lengths) < 8  # some rows left early
    for (prompt, answer, features), (prompt_1, answer_1, features_1) in zip(together, alone):
        assert prompt == prompt_1 and answer == answer_1
        assert torch.allclose(features, features_1, atol=1e-4, rtol=1e-3)


def test_the_target_writes_new_requests_it_can_answer(tiny):
    config = replace(TINY_CONFIG, requests_per_prompt=2, generate_batch=4)
    requests = self_instruct(tiny, ["Give me three tips for a tidy desk."], config, SuiteGuard())
    assert len(requests) == len(set(requests)) <= 2  # a tiny random model may write nothing usable
    assert usable_request('"Write a limerick about a cat who sails."\n\nMore text') == \
        "Write a limerick about a cat who sails."
    assert usable_request("ok") is None


def test_a_missing_head_is_trained_only_when_asked_once_and_the_page_says_so(monkeypatch, tmp_path):
    """lab.head_training: nothing trains a head by itself (the start-up never does: a newcomer's machine once
    spent 46 minutes of both cores on it); the status offers the button, whose start is one niced `train-head`
    child per target (a second press while it runs starts none); the status says it is training, then ready once
    the file is there; switched off (a Space), it offers nothing, refuses to start and says how to train by hand."""
    from types import SimpleNamespace

    from specviz.errors import SpecvizError
    from specviz.lab import head_training
    from specviz.lab.head_training import HeadState
    from specviz.runtime import shared_resources

    started = []

    class Child:
        pid = os.getpid()  # alive for as long as the test runs

        def __init__(self, command, **kwargs):
            started.append(command)

        def poll(self):
            return None

    monkeypatch.setenv("SPECVIZ_HEADS", str(tmp_path))
    monkeypatch.setattr(head_training.subprocess, "Popen", Child)
    monkeypatch.setattr(head_training, "_children", {})
    target = SimpleNamespace(name="some-target")
    monkeypatch.setenv("SPECVIZ_HEAD_TRAINING", "off")
    off = head_training.status(target)
    assert off.state is HeadState.OFF and "train-head" in off.message and not off.offer
    with pytest.raises(SpecvizError, match="does not train"):
        head_training.start(target)
    assert started == []
    monkeypatch.setenv("SPECVIZ_HEAD_TRAINING", "on")
    offered = head_training.status(target)
    assert offered.state is HeadState.OFF and offered.offer and "button below trains one" in offered.message
    assert started == []  # asking where it stands starts nothing
    first = head_training.start(target)
    again = head_training.start(target)
    assert len(started) == 1
    assert started[0][1:] == ["-m", "specviz", "train-head", "--model", "some-target", "--device", "cpu"]
    assert first.state is again.state is HeadState.TRAINING and first.training
    assert "being trained in the background" in first.message
    draft_head.head_path(target).write_bytes(b"")  # the child wrote the head
    assert head_training.status(target).state is HeadState.READY
    # the page asks by the model's name: nothing until a copy of it is loaded (in any run mode), then its status
    assert head_training.status_for_model("some-target") is None
    key = ("model", "some-target", "fp32")
    shared_resources.shared(key, lambda: target)
    try:
        assert shared_resources.loaded_model(" some-target ") is target
        assert head_training.status_for_model("some-target").state is HeadState.READY
    finally:
        shared_resources.release(key)
    assert head_training.status_for_model("some-target") is None
