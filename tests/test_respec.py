"""ReSpec's pieces (relaxed look-ahead verification, entropy trigger, match positions, EMA-scored
candidates, the draft model drafter) and the method on the real model: lossless at tau = 0."""

import math
import random
from pathlib import Path

import pytest
import torch

from specviz.accept.greedy import greedy_accept
from specviz.accept.relaxed import relaxed_accept
from specviz.drafters.draft_model import DraftModelDrafter
from specviz.drafters.entropy_trigger import EntropyTrigger, entropies
from specviz.drafters.scored_retrieval import ScoredRetriever
from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.engine.token_diff import token_diff
from specviz.errors import SpecvizError
from specviz.index.match_positions import MatchPositions
from specviz.records.notes import ReSpecNote
from specviz.records.status import NodeStatus
from specviz.records.trace import Trace
from specviz.runtime.loading import load_model
from specviz.tree.draft_tree import ROOT, DraftTree

SUITE = {i.id: i for i in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl")}
VOCAB = 20


def chain_logits(tree: DraftTree, best: dict[int, list[int]], gaps: dict[int, float] | None = None) -> torch.Tensor:
    """Logits per node: best[node] lists the target's preferred next tokens (rank 0 first, each 1 nat
    below the previous unless gaps[node] sets the step); unlisted tokens sit far below."""
    logits = torch.full((len(tree), VOCAB), -20.0)
    for node, tokens in best.items():
        step = (gaps or {}).get(node, 1.0)
        for rank, token in enumerate(tokens):
            logits[node, token] = 10.0 - step * rank
    return logits


def retrieval_chain(tokens: list[int], source: str = "retrieval") -> tuple[DraftTree, list[int]]:
    tree = DraftTree(0)
    return tree, tree.add_path(tokens, source)


# ---- relaxed verification -------------------------------------------------------------------------

def test_relaxed_token_needs_m_greedy_matches_after_it():
    tree, (a, b, c) = retrieval_chain([5, 6, 7])
    # at the root the target prefers 4, then 5 (1 nat lower); then it agrees with 6 and 7
    logits = chain_logits(tree, {ROOT: [4, 5], a: [6], b: [7], c: [8]})
    assert greedy_accept(tree, logits).path == []
    v = relaxed_accept(tree, logits, top_k=5, tau=1.5, min_greedy=2, max_attempts=2)
    assert v.path == [a, b, c] and v.bonus_token == 8
    assert v.statuses[a] == "relaxed" and v.statuses[b] == v.statuses[c] == "accepted"
    # three greedy matches needed, two follow: nothing is kept, the target's own token comes next
    v3 = relaxed_accept(tree, logits, top_k=5, tau=1.5, min_greedy=3, max_attempts=2)
    assert v3.path == [] and v3.bonus_token == 4 and v3.statuses[a] == "rejected"


@pytest.mark.parametrize("kwargs", [dict(tau=0.0), dict(tau=0.5), dict(top_k=1), dict(max_attempts=0)])
def test_relaxed_check_respects_tau_top_k_and_attempts(kwargs):
    tree, _ = retrieval_chain([5, 6, 7])
    logits = chain_logits(tree, {ROOT: [4, 5], 1: [6], 2: [7], 3: [8]})
    settings = dict(top_k=5, tau=1.5, min_greedy=2, max_attempts=2) | kwargs
    assert relaxed_accept(tree, logits, **settings).path == []


def test_model_nodes_are_verified_strictly():
    tree, _ = retrieval_chain([5, 6, 7], source="model")
    logits = chain_logits(tree, {ROOT: [4, 5], 1: [6], 2: [7], 3: [8]})
    assert relaxed_accept(tree, logits, top_k=5, tau=5.0, min_greedy=0, max_attempts=4).path == []


def test_attempts_are_counted_per_relaxed_token():
    # mismatches at the first and fourth tokens, each followed by two greedy matches
    tree, nodes = retrieval_chain([5, 6, 7, 9, 10, 11])
    best = {ROOT: [4, 5], 1: [6], 2: [7], 3: [8, 9], 4: [10], 5: [11], 6: [12]}
    logits = chain_logits(tree, best)
    assert relaxed_accept(tree, logits, 5, 1.5, 2, max_attempts=1).path == nodes[:3]
    v = relaxed_accept(tree, logits, 5, 1.5, 2, max_attempts=2)
    assert v.path == nodes and [v.statuses[n] for n in nodes].count("relaxed") == 2


def test_unconfirmed_relaxed_token_advances_to_the_next_position():
    # two relaxed tokens in a row, then two greedy matches: one attempt is not enough, two are
    tree, nodes = retrieval_chain([5, 9, 7, 8])
    logits = chain_logits(tree, {ROOT: [4, 5], 1: [6, 9], 2: [7], 3: [8], 4: [1]})
    assert relaxed_accept(tree, logits, 5, 1.5, 2, max_attempts=1).path == []
    assert relaxed_accept(tree, logits, 5, 1.5, 2, max_attempts=2).path == nodes


def test_longest_confirmed_branch_wins():
    tree = DraftTree(0)
    short = tree.add_path([5, 6, 7], "retrieval")
    long = tree.add_path([3, 6, 7, 8], "retrieval")
    logits = chain_logits(tree, {ROOT: [4, 5, 3], short[0]: [6], short[1]: [7], short[2]: [1],
                                 long[0]: [6], long[1]: [7], long[2]: [8], long[3]: [2]})
    assert relaxed_accept(tree, logits, 5, 2.5, 2, 2).path == long


# ---- entropy trigger ------------------------------------------------------------------------------

def test_entropies_of_known_distributions():
    uniform, peaked = torch.zeros(1, 8), torch.tensor([[0.0] + [-1e4] * 7])
    assert entropies(uniform)[0] == pytest.approx(math.log(8))
    assert entropies(peaked)[0] == pytest.approx(0.0, abs=1e-6)


def test_trigger_picks_the_key_with_the_lowest_confidence_score():
    trigger = EntropyTrigger(lookback=3, lambda_e=1.0, threshold=1.5)
    context = [1, 2, 3, 4, 5]
    trigger.record([9.0, 0.3, 0.6, 0.0])      # entropies predicting tokens 1..4 (token 0 has none)
    assert len(trigger.history) == len(context)
    d = trigger.decide(context, lambda key: 2)
    # H_1 = 0.0, H_2 = 0.3, H_3 = 0.3; C_k = H_k + 1/k = 1.0, 0.8, 0.633 -> k* = 3
    assert d.entropies == pytest.approx([0.0, 0.3, 0.3])
    assert d.key_length == 3 and d.key == [3, 4, 5] and d.h_min == pytest.approx(0.3) and d.fired
    assert not trigger.decide(context, lambda key: 0).fired          # key never seen before
    trigger.threshold = 0.2
    assert not trigger.decide(context, lambda key: 2).fired          # too uncertain


def test_match_positions_agree_with_brute_force():
    rng = random.Random(3)
    stream = [rng.randrange(4) for _ in range(300)]
    index = MatchPositions(max_len=3)
    index.feed(stream[:100])
    index.feed(stream[100:])
    for n in (1, 2, 3):
        for key in {tuple(stream[i:i + n]) for i in range(len(stream) - n)}:
            expected = [i + n for i in range(len(stream) - n) if tuple(stream[i:i + n]) == key]
            assert index.positions(key) == expected
    assert index.continuation(10, 4) == stream[10:14]


# ---- feedback-driven candidate selection ----------------------------------------------------------

def test_ema_scores_reward_the_winner_and_penalise_the_others():
    index = MatchPositions(max_len=2)
    # key (1, 2) occurs at 0, 5 and 10; what followed: 3 4 / 7 7 / 3 9
    index.feed([1, 2, 3, 4, 0, 1, 2, 7, 7, 0, 1, 2, 3, 9, 0, 1, 2])
    retriever = ScoredRetriever(alpha=0.5, theta_score=0.2, branches=3, branch_len=2)
    picked = retriever.select(index, [1, 2])
    assert [c.position for c in picked] == [12, 7, 2]        # all start at 0.5: the most recent first
    tree = retriever.tree(2, budget=16)
    accepted_path = [tree.child_with_token(ROOT, 3), tree.child_with_token(tree.child_with_token(ROOT, 3), 4)]
    v = greedy_accept(tree, chain_logits(tree, {ROOT: [3], accepted_path[0]: [4], accepted_path[1]: [5]}))
    retriever.feedback(tree, v.accepted_draft_tokens)
    # position 2 drafted 3 4 and both were accepted: R = 1; position 12 shares only "3" but is not the winner
    assert retriever.scores == {2: 0.75, 12: 0.25, 7: 0.25}
    retriever.theta_score = 0.3
    assert [c.position for c in retriever.select(index, [1, 2])] == [2]
    assert retriever.report().passed == 1


def test_positions_cut_by_the_budget_keep_their_score():
    index = MatchPositions(max_len=1)
    index.feed([1, 5, 6, 1, 7, 8, 1])
    retriever = ScoredRetriever(alpha=0.5, theta_score=0.0, branches=3, branch_len=2)
    retriever.select(index, [1])
    tree = retriever.tree(1, budget=16)
    kept = tree.select([tree.child_with_token(ROOT, 7)])      # the planner kept one node of one branch
    retriever.feedback(kept, [7])
    assert retriever.scores == {4: 0.5 * 0.5 + 0.5 * 1.0}


# ---- the draft model ------------------------------------------------------------------------------

def test_self_speculative_drafter_follows_greedy_and_keeps_its_cache(lm):
    prompt = SUITE["sum-cheese"].messages
    reference = Session(lm, "ar").start(prompt)
    reference.run(12)
    context = list(reference.prompt_ids)
    drafter = DraftModelDrafter(lm, lm.vocab_size, breadth=2, branch_levels=1, depth=4)
    tree = drafter.propose(context, budget=16)
    assert drafter.forwards == 4                     # the prompt, then levels 1..3 (level 4 is not fed)
    greedy = [ROOT]
    for _ in range(4):
        greedy.append(tree.children(greedy[-1])[0])  # the highest-probability child first
    assert [tree.tokens[n] for n in greedy[1:]] == reference.output_ids[:4]
    assert len(tree.children(ROOT)) == 2 and all(len(tree.children(c)) <= 1 for c in tree.children(ROOT))
    assert all(0 < tree.meta[n]["model"]["draft_prob"] <= 1 for n in range(1, len(tree)))
    # the target commits the 4 drafts and a bonus: the draft cache keeps the prefix and 3 fed drafts
    from specviz.drafters.base import StepOutcome
    committed = context + reference.output_ids[:5]
    drafter.observe(StepOutcome(tree=tree, verification=None, logits=None, context=committed))
    assert drafter.cached == len(context) + 3 == drafter.cache.get_seq_length()
    tree = drafter.propose(committed, budget=1)       # feeds the 4th draft and the new root only
    assert tree.tokens[1] == reference.output_ids[5]


# ---- the method on the real model -----------------------------------------------------------------

@pytest.mark.parametrize("fallback,budget", [("model", 16), ("logits", 32), ("auto", "auto")])
@pytest.mark.parametrize("item_id", ["sum-lighthouse", "conv-trip", "open-poem", "math-train"])
def test_respec_at_tau_zero_is_lossless(lm, ar_outputs, item_id, fallback, budget):
    session = Session(lm, "respec", {"fallback": fallback}, budget=budget).start(SUITE[item_id].messages)
    session.run(48)
    assert session.output_ids == ar_outputs[item_id]
    used = {r.note(ReSpecNote).drafted_by for r in session.records}
    assert used <= {"retrieval", fallback, *(("model", "logits") if fallback == "auto" else ())}
    assert all(n.status is not NodeStatus.RELAXED for r in session.records for n in r.nodes)


def test_respec_trigger_and_candidates_are_recorded(lm, tmp_path):
    session = Session(lm, "respec", {"fallback": "logits"}, budget=32).start(SUITE["sum-lighthouse"].messages)
    session.run(48)
    notes = [r.note(ReSpecNote) for r in session.records]
    fired = [note.trigger for note in notes if note.trigger.fired]
    assert fired and all(trigger.h_min <= 1.5 and trigger.matches > 0 for trigger in fired)
    assert all(len(note.trigger.entropies) == 3 for note in notes)
    retrieval_steps = [r for r, note in zip(session.records, notes) if note.drafted_by == "retrieval"]
    assert retrieval_steps and all(1 <= len(r.note(ReSpecNote).retrieval.candidates) <= 3 for r in retrieval_steps)
    assert all({s for n in r.nodes[1:] for s in n.sources} == {"retrieval"} for r in retrieval_steps)
    path = tmp_path / "trace.json"
    session.trace().save(path)
    assert Trace.load(path) == session.trace()


def test_relaxed_acceptance_raises_mat_and_is_marked(lm, ar_outputs):
    item = SUITE["sum-lighthouse"].messages
    strict = Session(lm, "respec", {"fallback": "logits"}, budget=32).start(item)
    strict.run(48)
    loose = Session(lm, "respec", {"fallback": "logits", "tau": 5}, budget=32).start(item)
    loose.run(48)
    relaxed = [n for r in loose.records for n in r.nodes if n.status is NodeStatus.RELAXED]
    assert relaxed and all("retrieval" in n.sources and 0 < n.target_rank < 5 for n in relaxed)
    assert len(loose.records) < len(strict.records)
    diff = token_diff(ar_outputs["sum-lighthouse"], loose.output_ids)
    assert not diff.identical and diff.differing > 0


# ---- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("params,message", [
    ({"tau": -1}, "tau must be between"), ({"theta_score": 1.5}, "theta_score must be between"),
    ({"lookback": 0}, "lookback must be between"), ({"fallback": "eagle"}, "fallback must be one of"),
    ({"m": 2.5}, "m must be a whole number")])
def test_bad_respec_settings_are_clear_errors(lm, params, message):
    with pytest.raises(SpecvizError, match=message):
        Session(lm, "respec", params)


def test_any_draft_model_folder_works_and_stays_lossless(lm, ar_outputs, tiny_models):
    draft = load_model(tiny_models["same"])
    session = Session(lm, "respec", {"fallback": "model"}, budget=8, draft=draft).start(SUITE["qa-meeting"].messages)
    session.run(48)
    assert session.output_ids == ar_outputs["qa-meeting"]
    assert any(r.note(ReSpecNote).drafted_by == "model" for r in session.records)
    assert session.trace().params["draft_model"] == tiny_models["same"]


def test_draft_model_with_another_vocabulary_is_refused(lm, tiny_models):
    draft = load_model(tiny_models["other"])
    with pytest.raises(SpecvizError, match="another vocabulary"):
        Session(lm, "respec", draft=draft)


def test_missing_draft_model_folder_is_a_clear_error():
    with pytest.raises(SpecvizError, match="does not exist"):
        load_model("/no/such/draft-model")
