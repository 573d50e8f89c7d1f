"""RAPID and sampling with the real model: retrieval over the shipped long documents, the RAG drafter's
own context, greedy losslessness on a long document, and statistical losslessness of every method's
sampled output (the first two tokens over many seeds against the target's own distribution)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_sampling import chi_square_p

from specviz.accept.sampling import SamplingSettings
from specviz.engine.session import Session
from specviz.studies.suite import long_context_prompt
from specviz.errors import SpecvizError
from specviz.index.chunk_retrieval import chunk_document, retrieve
from specviz.methods import METHODS
from specviz.records.status import NodeStatus

DOCS = Path(__file__).parent.parent / "assets" / "documents"
FERRY = (DOCS / "ferry-timetable-reform.md").read_text()
FERRY_QUESTIONS = json.loads((DOCS / "ferry-timetable-reform.questions.json").read_text())


def test_documents_are_long_and_questions_answerable(lm):
    """Every shipped document is 2,000-7,000 tokens, and each answer is in its evidence sentence, in it."""
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        assert 2000 <= len(lm.tokenizer(text)["input_ids"]) <= 7000, path.name
        for q in json.loads(path.with_suffix(".questions.json").read_text()):
            assert q["evidence"] in text and q["answer"] in q["evidence"], (path.name, q["question"])


def test_chunks_tile_the_document(lm):
    chunks = chunk_document(lm.tokenizer, FERRY, 512)
    assert "".join(c.text for c in chunks) == FERRY
    assert all(c.tokens <= 512 for c in chunks) and len(chunks) >= 4


def test_bm25_finds_the_evidence(lm):
    """The chosen chunks (budget 1024) hold the evidence sentence for most shipped questions."""
    hits = total = 0
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        for q in json.loads(path.with_suffix(".questions.json").read_text()):
            found = retrieve(lm.tokenizer, text, q["question"], 512, 1024, 0.3, "bm25")
            hits += any(q["evidence"] in found.chunks[i].text for i in found.chosen)
            total += 1
    assert hits >= 0.8 * total


def test_no_chunk_above_the_threshold_falls_back_to_the_question(lm):
    prompt = long_context_prompt(FERRY, "What colour is the sky on Mars?")
    session = Session(lm, "rapid", {"ranker": "minilm", "min_similarity": 0.95}).start(prompt)
    assert session.method.retrieval.chosen == []
    assert any("question alone" in w for w in session.method.warnings)
    session.run(4)   # still drafts, from the question alone
    assert len(session.output_ids) == 4


def test_rapid_greedy_is_lossless_on_a_long_document(lm):
    prompt = long_context_prompt(FERRY, FERRY_QUESTIONS[1]["question"])
    reference = Session(lm, "ar").start(prompt)
    reference.run(24)
    session = Session(lm, "rapid", {"gamma": 6, "retrieval_budget": 512}).start(prompt)
    session.run(24)
    assert session.output_ids == reference.output_ids
    # the drafter reads its own, shorter prompt: at most one 512-token chunk plus the question
    drafter = session.method.stages[0]
    assert drafter.own_prompt is not None and len(drafter.own_prompt) < len(session.prompt_ids) - 1000
    assert session.lossless and sum(r.num_accepted_drafts for r in session.records) > 0


def test_eta_is_refused_at_temperature_zero_and_declared_lossy_above(lm):
    with pytest.raises(SpecvizError, match="eta has no effect at temperature 0"):
        Session(lm, "rapid", {"eta": 5})
    assert not Session(lm, "rapid", {"eta": 5}, sampling=SamplingSettings(0.8)).lossless
    assert Session(lm, "rapid", {"eta": 0}, sampling=SamplingSettings(0.8)).lossless


def test_bad_input_gets_a_clear_message(lm):
    with pytest.raises(SpecvizError, match="eta must be between"):
        Session(lm, "rapid", {"eta": -1}, sampling=SamplingSettings(0.8))
    with pytest.raises(SpecvizError, match="chunk_tokens must be between"):
        Session(lm, "rapid", {"chunk_tokens": 0})
    with pytest.raises(SpecvizError, match="ranker must be one of"):
        Session(lm, "rapid", {"ranker": "tfidf"})
    too_long = long_context_prompt(FERRY * 4, "Who ran the consultation?")   # about 8,700 tokens
    with pytest.raises(SpecvizError, match="context holds 8192.*refused rather than silently cut"):
        Session(lm, "rapid").start(too_long)


def test_compression_sets_the_retrieval_length_from_the_document(lm):
    """RAPID §2.3 / §3.1: the drafter reads |C| / λ tokens of the document, at least retrieval_budget."""
    from specviz.methods.rapid import Rapid
    from specviz.runtime.prompts import PromptText

    method = object.__new__(Rapid)   # only its prompt is read
    method.prompt = PromptText.of(long_context_prompt(FERRY, FERRY_QUESTIONS[0]["question"]))
    tokens = len(lm.tokenizer(method.prompt.document, add_special_tokens=False).input_ids)
    assert method.retrieval_budget(lm, {"compression": 0.0, "retrieval_budget": 64}) == 64
    assert method.retrieval_budget(lm, {"compression": 2.0, "retrieval_budget": 64}) == -(-tokens // 2)
    assert method.retrieval_budget(lm, {"compression": 24.0, "retrieval_budget": 4096}) == max(4096, -(-tokens // 24))


def test_rapid_drafts_with_the_layer_skip_drafter(lm):
    from specviz.runtime.draft_model_spec import shared_draft

    prompt = long_context_prompt(FERRY[:3000], FERRY_QUESTIONS[0]["question"])
    reference = Session(lm, "ar").start(prompt)
    reference.run(12)
    session = Session(lm, "rapid", {"gamma": 4}, draft=shared_draft(lm, "self-skip:8")).start(prompt)
    session.run(12)
    assert session.output_ids == reference.output_ids


def test_sampled_rapid_is_reproducible_and_marks_transfers(lm):
    prompt = long_context_prompt(FERRY[:1500], "Which islands does the report name first?")
    runs = []
    for _ in range(2):
        session = Session(lm, "rapid", {"gamma": 4, "eta": 20, "chunk_tokens": 64, "retrieval_budget": 128},
                          sampling=SamplingSettings(1.0, seed=7)).start(prompt)
        session.run(24)
        runs.append((session.output_ids, [(n.status, n.mark) for r in session.records for n in r.nodes]))
    assert runs[0] == runs[1]
    assert all(status is NodeStatus.ACCEPTED for status, mark in runs[0][1] if mark is NodeStatus.TRANSFERRED)
    other = Session(lm, "rapid", {"gamma": 4}, sampling=SamplingSettings(1.0, seed=8)).start(prompt)
    other.run(24)
    assert other.output_ids != runs[0][0]
    chart = session.records[0].sampling.charts[0]
    assert None not in (chart.p, chart.q, chart.p_hat, chart.out, chart.tv)


# ---- statistical losslessness of every method -------------------------------------------------------
STAT_PROMPT = ("My garden has roses, tulips and daisies.\n\nThe list: red, green, blue, red, green, blue, red, green.\n\n"
               "Continue the list with one more colour, then say something about it.")
# rapid retrieves one paragraph of the two: its q differs from p
STAT_PARAMS = {"rapid": {"gamma": 3, "chunk_tokens": 16, "retrieval_budget": 16},
               "respec": {"draft_depth": 2}, "reader": {"draft_depth": 2}, "unified": {"draft_depth": 2}}
TEMPERATURE = 1.0
FAST = ["racer", "rapid"]


def target_joint(lm, prompt_ids: list[int], firsts: int = 24, seconds: int = 8) -> dict[tuple, float]:
    """p(t1) p(t2 | t1) for the most likely pairs (the test pools the rest), from one batched forward."""
    with torch.inference_mode():
        first = torch.softmax(lm.model(torch.tensor([prompt_ids])).logits[0, -1].double() / TEMPERATURE, -1)
        top = first.topk(firsts).indices.tolist()
        batch = torch.tensor([prompt_ids + [t1] for t1 in top])
        second = torch.softmax(lm.model(batch).logits[:, -1].double() / TEMPERATURE, -1)
    joint = {}
    for row, t1 in enumerate(top):
        for t2 in second[row].topk(seconds).indices.tolist():
            joint[(t1, t2)] = float(first[t1] * second[row, t2])
    return joint


def joint_p_value(lm, method: str, runs: int, acceptance: str = "seeded") -> float:
    from specviz.runtime.prompts import encode

    prompt_ids = encode(lm.tokenizer, STAT_PROMPT, lm.max_context)
    joint = target_joint(lm, prompt_ids)
    pairs = list(joint)
    counts = np.zeros(len(pairs) + 1)
    index = {pair: i for i, pair in enumerate(pairs)}
    for seed in range(runs):
        params = {**STAT_PARAMS.get(method, {}), **({"acceptance": acceptance} if method != "ar" else {})}
        session = Session(lm, method, params, budget=8, sampling=SamplingSettings(TEMPERATURE, seed=seed))
        session.start(STAT_PROMPT)
        session.run(2)
        counts[index.get(tuple(session.output_ids[:2]), len(pairs))] += 1
    expected = np.append(np.array([joint[p] for p in pairs]), max(0.0, 1 - sum(joint.values())))
    p_value = chi_square_p(counts, expected / expected.sum())
    print(f"{method} acceptance={acceptance}: chi-square p = {p_value:.3f} over {runs} seeds")  # shown with -s
    return p_value


@pytest.mark.long
@pytest.mark.parametrize("method", FAST)
def test_sampled_output_follows_the_target(lm, method):
    """The first two sampled tokens of each method over many seeds follow p(t1) p(t2 | t1)."""
    assert joint_p_value(lm, method, 200) > 1e-3


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("method", [m for m in METHODS if m not in FAST])
def test_sampled_output_follows_the_target_every_method(lm, method):
    assert joint_p_value(lm, method, 200) > 1e-3


@pytest.mark.long
@pytest.mark.parametrize("method", [m for m in METHODS if m != "ar"])
def test_the_standard_rule_follows_the_target_every_method(lm, method):
    """The same check under speculative sampling's rule (the session's coins decide, not the seed's draws)."""
    assert joint_p_value(lm, method, 200, acceptance="standard") > 1e-3
