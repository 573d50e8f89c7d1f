"""RACER's pieces: the copy-logit table and logits tree, the retrieval drafter, the merged tree."""

import numpy as np
import pytest
import torch

from specviz.accept.greedy import greedy_accept
from specviz.drafters.automaton_retrieval import AutomatonDrafter
from specviz.drafters.copy_logits import CopyLogitDrafter, CopyLogitTable, child_breadth
from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.errors import SpecvizError
from specviz.methods import get_method
from specviz.tree.draft_tree import ROOT, DraftTree

VOCAB = 50


def peaked_logits(next_tokens: list[list[int]]) -> torch.Tensor:
    """One row per position; the listed tokens get logits 10, 9, 8, ... (best first), the rest 0."""
    logits = torch.zeros(len(next_tokens), VOCAB)
    for row, tokens in enumerate(next_tokens):
        for rank, token in enumerate(tokens):
            logits[row, token] = 10.0 - rank
    return logits


def test_breadth_schedule_follows_the_paper():
    assert [child_breadth(8, j, True) for j in range(8)] == [8, 4, 2, 1, 1, 1, 1, 1]
    assert [child_breadth(8, j, False) for j in range(8)] == [4, 2, 1, 1, 1, 1, 1, 1]
    assert [child_breadth(4, j, False) for j in range(4)] == [2, 1, 1, 1]
    assert child_breadth(1, 0, False) == 1


def test_cold_rows_draft_nothing():
    drafter = CopyLogitDrafter(max_breadth=8)
    assert drafter.propose([3, 7], budget=16).num_drafted == 0  # nothing seen yet: no token 0, no filler
    drafter.prefill_chunk([5], 0, peaked_logits([[7, 8]]))
    tree = drafter.propose([3, 7], budget=16)
    assert tree.num_drafted == 0  # the root token 7 was never followed by anything we saw
    tree = drafter.propose([3, 5], budget=16)
    assert [tree.tokens[c] for c in tree.children(ROOT)][:2] == [7, 8]


def test_most_recent_occurrence_wins():
    table = CopyLogitTable(width=2)
    table.store([4, 9, 4], peaked_logits([[1, 2], [3, 4], [5, 6]]))
    tokens, probs = table.row(4)
    assert tokens.tolist() == [5, 6] and probs[0] > probs[1] > 0
    table.store([4], peaked_logits([[7, 8]]))
    assert table.row(4)[0].tolist() == [7, 8]


def test_logits_tree_is_breadth_first_with_decreasing_breadth():
    drafter = CopyLogitDrafter(max_breadth=4)
    # every token t in 0..19 is followed by t+1, t+2, t+3, t+4 (best first)
    context = list(range(20))
    drafter.prefill_chunk(context, 0, peaked_logits([[t + k for k in range(1, 5)] for t in context]))
    tree = drafter.propose([0], budget=100)
    root_children = tree.children(ROOT)
    assert [tree.tokens[c] for c in root_children] == [1, 2, 3, 4]
    # root breadth 4: its children get 4, 2, 1, 1; a child of breadth 4 gets 4 children of its own
    assert [len(tree.children(c)) for c in root_children] == [4, 2, 1, 1]
    first = root_children[0]
    assert [len(tree.children(c)) for c in tree.children(first)] == [2, 1, 1, 1]
    assert drafter.propose([0], budget=6).num_drafted == 6
    depths = [tree.depths[n] for n in tree.expansion_order()]
    assert depths == sorted(depths)


def test_the_offer_leaves_out_exactly_the_nodes_below_the_least_path_probability():
    context = list(range(40))
    logits = peaked_logits([[t + k for k in range(1, 5)] for t in context])
    full, cut = CopyLogitDrafter(max_breadth=4), CopyLogitDrafter(max_breadth=4, min_path_prob=0.05)
    for drafter in (full, cut):
        drafter.prefill_chunk(context, 0, logits)

    def paths(tree):  # every node as its tokens from the root, with its path probability
        return {tuple(tree.tokens[m] for m in tree.path_to(n)):
                float(np.prod([tree.meta[m]["logits"]["prior"] for m in tree.path_to(n)])) for n in range(1, len(tree))}

    for budget in (3, 6, 12, 25, 100):  # the left-out nodes keep their places in the budget
        whole, offered = paths(full.propose([0], budget)), paths(cut.propose([0], budget))
        assert offered == {path: p for path, p in whole.items() if p >= 0.05}
        assert len(offered) < len(whole) or budget == 3
    # a node the tree holds already (another source's) is merged whatever its path probability
    tree = DraftTree(0)
    low = tree.add(ROOT, 4, "retrieval")  # the row's fourth token (~0.03)
    tree, proposed = cut.extend([0], tree, 100)
    assert tree.sources[low] == {"retrieval", "logits"} and not tree.children(low)
    assert proposed == len(tree) - 1


def test_best_first_order_is_the_frontier_walk_by_score():
    import random

    rng = random.Random(3)
    for trial in range(40):
        tree = DraftTree(1)
        while len(tree) < 30:
            tree.add(rng.randrange(len(tree)), rng.randrange(50), "logits")
        scores = [1.0]
        for node in range(1, len(tree)):  # a child at most its parent (the planner's chances), ties included
            scores.append(scores[tree.parents[node]] * rng.choice([1.0, 0.5, 0.25]))
        if trial % 2:  # a child that outscores its parent (a better-calibrated source): the walk decides
            scores[rng.randrange(2, len(tree))] = 2.0
        assert tree.best_first(scores) == tree.expansion_order(key=lambda n: (-scores[n], n))


def test_logits_stage_grows_the_tree_as_merging_its_own_proposal_would():
    drafter = CopyLogitDrafter(max_breadth=4)
    context = list(range(20))
    drafter.prefill_chunk(context, 0, peaked_logits([[t + k for k in range(1, 5)] for t in context]))
    def earlier_stage():  # another source already holds two of the nodes the logits tree proposes
        tree = DraftTree(0)
        tree.add(tree.add(ROOT, 2, "retrieval"), 3, "retrieval")
        tree.add(ROOT, 9, "retrieval")
        return tree
    for budget in (1, 5, 12, 40):
        merged = earlier_stage().merge(drafter.propose([0], budget))
        grown, proposed = drafter.extend([0], earlier_stage(), budget)
        assert proposed == drafter.propose([0], budget).num_drafted
        assert (grown.tokens, grown.parents, grown.sources, grown.meta) == \
               (merged.tokens, merged.parents, merged.sources, merged.meta)


def test_retrieval_first_then_logits_share_the_budget(lm):
    suite = {i.id: i for i in load_suite("assets/suite.jsonl")}
    session = Session(lm, "racer", budget=24).start(suite["code-rename"].messages)
    session.run(40)
    splits = [r.split for r in session.records]
    assert all(list(s) == ["retrieval", "logits"] for s in splits)
    for r, split in zip(session.records, splits):
        assert split["logits"].offered == 24 - split["retrieval"].proposed
        assert len(r.nodes) - 1 <= 24
    both = [n for r in session.records for n in r.nodes if set(n.sources) == {"logits", "retrieval"}]
    assert both, "trie union merges a token both sources proposed into one node"
    assert any(r.allocation["retrieval"] for r in session.records)


def test_observe_refreshes_rows_from_the_verified_tree(lm):
    session = Session(lm, "racer-logits", budget=16).start("Name three colours.")
    drafter = session.method.stages[0]
    session.step()
    record = session.records[-1]
    for node in record.nodes:
        assert drafter.table.row(node.token_id) is not None  # every verified node's row is filled


def test_rows_from_a_verified_step_equal_rows_read_off_the_logits():
    """observe() stores rows from the step's shared top-k and normalisers (numpy, no tensor work per row);
    they must be the rows store() computes from the logits themselves."""

    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 4096, generator=generator) * 4
    tree = DraftTree(3)
    a = tree.add(ROOT, 11, "logits")
    tree.add(a, 12, "logits")
    b = tree.add(ROOT, 13, "logits")
    tree.add(b, 11, "logits")  # token 11 twice: the later row (node 4's) must win
    tree.add(a, 14, "logits")
    verification = greedy_accept(tree, logits)
    order = [1, 2, 3, 4, 5, 0]
    tokens = [tree.tokens[n] for n in order]
    from_step, from_logits = CopyLogitTable(width=8), CopyLogitTable(width=8)
    from_step.store(tokens, logits, verification.log_norms, (verification.top.values_np, verification.top.ids_np), order)
    from_logits.store(tokens, logits.index_select(0, torch.tensor(order)))
    assert set(from_step.rows) == set(from_logits.rows) == set(tokens)
    for token in tokens:
        step_ids, step_probs = from_step.row(token)
        ids, probs = from_logits.row(token)
        assert step_ids.tolist() == ids.tolist()
        assert step_probs == pytest.approx(probs, rel=1e-5)
    assert from_step.row(11)[0].tolist() == logits[4].topk(8).indices.tolist()


@pytest.mark.parametrize("params, message", [
    ({"ngram_length": 0}, "ngram_length must be between"),
    ({"ngram_length": 1000}, "ngram_length must be between"),
    ({"capacity": 0}, "capacity must be between"),
    ({"max_breadth": 0}, "max_breadth must be between"),
    ({"max_breadth": 17}, "max_breadth must be between"),
    ({"min_match": 6, "ngram_length": 4}, "must not exceed"),
])
def test_bad_racer_settings_are_clear(lm, params, message):
    with pytest.raises(SpecvizError, match=message):
        Session(lm, "racer", params)


def test_ablations_have_their_own_parameters():
    # acceptance is every drafting method's sampling rule, not one of RACER's own knobs
    assert {p.name for p in get_method("racer-logits").params} == {"max_breadth", "min_path_prob", "warm_table", "acceptance"}
    assert not {"max_breadth", "min_path_prob", "warm_table"} & {p.name for p in get_method("racer-retrieval").params}
    with pytest.raises(SpecvizError, match="has no parameter"):
        get_method("racer-logits").resolve_params({"capacity": 100})


def test_retrieval_drafter_stays_within_capacity_on_a_long_context():
    drafter = AutomatonDrafter(max_ngram=10, capacity=500)
    context = [(i * 7919) % 3001 for i in range(20_000)]
    tree = drafter.propose(context, budget=32)
    assert len(drafter.automaton) <= 500 and tree.num_drafted <= 32


OPEN_PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a kite."}]


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
