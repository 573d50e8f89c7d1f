"""Session: a step, the limits (EOS, token limit, context), all-or-nothing steps, the step record's
timing, seeded sampling, traces, and clear errors for bad settings and prompts."""

import time
from pathlib import Path

import pytest

from specviz.accept.sampling import SamplingSettings
from specviz.drafters.base import Drafter
from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.errors import SpecvizError
from specviz.records.status import NodeStatus
from specviz.records.trace import Trace
from specviz.tree.draft_tree import DraftTree

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
    real = session_module.verify_tree

    def failing(model, cache, tree, past_len, features=False):
        real(model, cache, tree, past_len, features)  # the cache grows, then the step fails
        raise RuntimeError("out of memory")

    monkeypatch.setattr(session_module, "verify_tree", failing)
    with pytest.raises(RuntimeError):
        session.step()
    assert (session.context, session.cache.get_seq_length()) == before
    monkeypatch.setattr(session_module, "verify_tree", real)
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
    assert record.timings_ms.update >= 20 and record.timings_ms.total >= 20 + record.timings_ms.forward
    assert session.step_s * 1000 >= record.timings_ms.total - 0.01


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


# the long-context items (2K-7K token documents) have their own, shorter checks in test_rapid
SUITE = [i for i in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl") if i.category != "long-context"]


def test_pld_accepts_drafts_on_copy_prompt(lm):
    item = next(i for i in SUITE if i.id == "code-rename")  # the model copies the given code
    session = Session(lm, "pld", budget=16).start(item.messages)
    session.run(48)
    assert max(r.num_accepted_drafts for r in session.records) >= 3
    assert session.stats().mean_accepted > 1.0
    statuses = {n.status for r in session.records for n in r.nodes}
    assert "accepted" in statuses


def test_ar_is_one_token_per_step(lm):
    session = Session(lm, "ar").start("Say hello.")
    session.run(5)
    assert [len(r.accepted_tokens) for r in session.records] == [1] * len(session.records)
    assert len(session.output_ids) == 5


def test_stops_at_eos_and_limit(lm):
    session = Session(lm, "pld", budget=8).start("Reply with the single word: yes")
    session.run(64)
    assert session.finish_reason == "eos" and session.output_ids[-1] in lm.eos_ids
    with pytest.raises(SpecvizError):
        session.step()
    limited = Session(lm, "pld", budget=8).start("Count from one to fifty in words.")
    limited.run(7)
    assert len(limited.output_ids) == 7 and not limited.finished
    limited.run(12)  # a higher limit carries on
    assert len(limited.output_ids) == 12


def test_context_limit_stops_generation(lm):
    session = Session(lm, "pld", budget=8).start("Write a long story.")
    lm_limit = lm.max_context
    try:
        lm.max_context = len(session.context) + 3
        session.run(50)
    finally:
        lm.max_context = lm_limit
    assert session.finish_reason in ("context", "eos")
    assert len(session.context) <= len(session.prompt_ids) + 3 + 1


def test_sampling_runs_and_is_reproducible(lm):
    runs = []
    for _ in range(2):
        session = Session(lm, "pld", budget=8, sampling=SamplingSettings(0.8, seed=3)).start("Tell me about cats.")
        session.run(16)
        runs.append(session.output_ids)
    assert runs[0] == runs[1] and len(runs[0]) == 16


def test_trace_round_trip(lm, tmp_path):
    session = Session(lm, "pld", budget=8).start("Repeat twice: red green blue, red green blue.")
    session.run(16)
    trace = session.trace()
    path = tmp_path / "trace.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    assert loaded.steps[0].nodes[0].status is NodeStatus.ROOT
    record = loaded.steps[-1]
    assert record.timings_ms.total >= record.timings_ms.verify >= record.timings_ms.forward > 0
    # the trace's JSON keeps the keys it always had
    assert set(trace.to_dict()["steps"][-1]["timings_ms"]) == {"draft", "verify", "forward", "update", "total"}
    assert all(isinstance(origin, str) for origin in trace.to_dict()["steps"][-1]["accepted_origins"])
    assert set(record.allocation) == {"logits", "retrieval", "model"}


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "nope"}, "Unknown method"),
    ({"method": "pld", "budget": 0}, "budget must be between"),
    ({"method": "pld", "budget": 10_000}, "budget must be between"),
    ({"method": "pld", "params": {"max_ngram": 0}}, "max_ngram must be between"),
    ({"method": "pld", "params": {"tau": 1}}, "has no parameter 'tau'"),
    ({"method": "pld", "sampling": SamplingSettings(-1)}, "temperature"),
])
def test_bad_settings_are_clear_errors(lm, kwargs, message):
    with pytest.raises(SpecvizError, match=message):
        Session(lm, **kwargs)


def test_bad_prompts_are_clear_errors(lm):
    with pytest.raises(SpecvizError, match="empty"):
        Session(lm, "ar").start("   ")
    with pytest.raises(SpecvizError, match="context holds"):
        Session(lm, "ar").start("word " * (lm.max_context + 10))
    with pytest.raises(SpecvizError, match="No prompt"):
        Session(lm, "ar").step()
