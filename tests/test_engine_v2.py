"""Engine v2: a step is all or nothing, methods declare losslessness, sources are a registry, and a
resource being loaded blocks only those who need it."""

import threading
import time

import pytest

from specviz.runtime import shared as resources
from specviz.tree import sources
from specviz.engine.session import Session
from specviz.tree.draft_tree import DraftTree
from specviz.drafters.base import Drafter
from specviz.methods import METHODS, get_method

PROMPT = "Repeat exactly: the red fox jumps over the lazy dog, the red fox jumps over the lazy dog."


class Exploding(Drafter):
    """Raises in the phase it is told to, on the step it is told to."""
    source = "retrieval"

    def __init__(self, phase: str, on_call: int):
        self.phase, self.on_call, self.calls = phase, on_call, {"propose": 0, "observe": 0}

    def _maybe(self, phase):
        self.calls[phase] += 1
        if phase == self.phase and self.calls[phase] == self.on_call:
            raise RuntimeError(f"boom in {phase}")

    def propose(self, context, budget):
        self._maybe("propose")
        return DraftTree(context[-1])

    def observe(self, outcome):
        self._maybe("observe")


@pytest.mark.parametrize("method", ["racer", "respec", "unified"])
@pytest.mark.parametrize("phase", ["propose", "observe"])
def test_a_failing_step_leaves_everything_as_it_was(lm, method, phase):
    """A drafter raising on the 3rd step (in drafting, or after every real drafter learnt from the
    step) leaves cache, context and drafters as before: the run then goes on exactly like one that
    never failed (same tokens, same trees)."""
    params = {"model_stage": "on", "draft_depth": 2} if method == "unified" else \
        {"fallback": "logits"} if method == "respec" else {}
    clean = Session(lm, method, params, budget=24).start(PROMPT)
    clean.run(30)
    session = Session(lm, method, params, budget=24).start(PROMPT)
    # drafting: first, so it always drafts; learning: last, after every real drafter has learnt
    session.method.stages.insert(0 if phase == "propose" else len(session.method.stages), Exploding(phase, 3))
    for _ in range(2):
        session.step(30)
    context, cache_len = list(session.context), session.cache.get_seq_length()
    with pytest.raises(RuntimeError, match="boom"):
        session.step(30)
    assert session.context == context and session.cache.get_seq_length() == cache_len
    assert len(session.records) == 2
    session.run(30)
    assert session.output_ids == clean.output_ids
    assert [[(n.token_id, n.parent) for n in r.nodes] for r in session.records] == \
        [[(n.token_id, n.parent) for n in r.nodes] for r in clean.records]


def test_a_failing_forward_leaves_the_cache_as_it_was(lm, monkeypatch):
    import specviz.engine.session as session_module

    session = Session(lm, "racer", budget=16).start(PROMPT)
    session.step()
    before = (list(session.context), session.cache.get_seq_length())
    real = session_module.tree_forward

    def failing(model, cache, tree, past_len):
        real(model, cache, tree, past_len)  # the cache grows, then the step fails
        raise RuntimeError("out of memory")

    monkeypatch.setattr(session_module, "tree_forward", failing)
    with pytest.raises(RuntimeError):
        session.step()
    assert (session.context, session.cache.get_seq_length()) == before
    monkeypatch.setattr(session_module, "tree_forward", real)
    session.run(12)
    reference = Session(lm, "ar").start(PROMPT)
    reference.run(12)
    assert session.output_ids == reference.output_ids


def test_the_step_record_is_timed_as_part_of_the_step(lm, monkeypatch):
    """Building the step record is engine work: it counts in update, total and the session's time."""
    build = Session._record

    def slow_record(self, *args):
        time.sleep(0.02)
        return build(self, *args)

    monkeypatch.setattr(Session, "_record", slow_record)
    session = Session(lm, "racer").start("Say hello.")
    record = session.step()
    assert record.timings_ms["update"] >= 20 and record.timings_ms["total"] >= 20 + record.timings_ms["forward"]
    assert session.step_s * 1000 >= record.timings_ms["total"] - 0.01


def test_methods_declare_whether_they_are_lossless():
    respec = get_method("respec")
    assert respec.lossless(respec.resolve_params({}), 0.0)
    assert not respec.lossless(respec.resolve_params({"tau": 3}), 0.0)
    assert respec.lossless(respec.resolve_params({"tau": 3}), 0.8)  # relaxation is a greedy rule
    for name in ("ar", "pld", "racer", "reader", "unified"):
        method = get_method(name)
        assert method.lossless(method.resolve_params({}), 0.0)
    assert {"reader", "unified"} <= set(METHODS)


def test_sources_are_an_open_registry():
    assert {s.family for s in sources.SOURCES.values()} == set(sources.FAMILIES)
    sources.register("test-source", "retrieval", "#123456", "a source added by a test")
    try:
        tree = DraftTree(1)
        tree.add(0, 5, "test-source")
        assert tree.allocation()["test-source"] == 1
        from specviz.ui.viz import colour_of, source_legend_html
        assert colour_of("test-source") == "#123456" and "test-source" in source_legend_html()
    finally:
        del sources.SOURCES["test-source"]
    with pytest.raises(ValueError):
        DraftTree(1).add(0, 5, "nowhere")


def test_loading_one_resource_never_blocks_another():
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(60)
        return "slow"

    worker = threading.Thread(target=lambda: resources.shared(("test", "slow"), slow))
    worker.start()
    assert started.wait(30)
    assert resources.shared(("test", "fast"), lambda: "fast") == "fast"
    # the slow load is still inside its loader: the fast one did not wait for its lock
    assert worker.is_alive() and not release.is_set()
    release.set()
    worker.join(5)
    assert resources.shared(("test", "slow"), lambda: "again") == "slow"  # loaded once


def test_token_texts_are_the_tokenizer_decoding_shared_by_sessions(lm):
    from specviz.engine.session import TokenTexts
    tokenizer = lm.tokenizer
    first, second = Session(lm, "ar").token_text, Session(lm, "ar").token_text
    ids = list(range(0, len(tokenizer), 211)) + list(tokenizer.all_special_ids) + [len(tokenizer) - 1]
    assert [first(i) for i in ids] == [tokenizer.decode([i]) for i in ids]
    assert second(ids[1]) == first(ids[1]) and second.texts is first.texts  # the vocabulary decoded once

    class Decoder:  # a tokenizer whose vocabulary is smaller than the ids the model may emit
        def __len__(self):
            return 3

        def batch_decode(self, batches):
            return [f"t{batch[0]}" for batch in batches]

        def decode(self, ids):
            return f"late{ids[0]}"

    texts = TokenTexts(Decoder())
    assert [texts(0), texts(2), texts(7)] == ["t0", "t2", "late7"]
