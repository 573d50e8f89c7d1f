"""The static tree a drafter's acceptance by rank justifies: counting rank paths, the best tree for N tokens
(against brute force), the refusals, the tree's JSON and GraphML, what the command and the tab show of each
engine's advice (tests/test_engine_configs.py checks the advice itself), and the measurement on
a real run (the target drafting for itself follows rank 0 everywhere; the head's teacher-forced ranks are its
dynamic tree's child order)."""

import itertools
import json

import networkx as nx
import pytest
import torch

from specviz.cli import main
from specviz.drafters.head import HeadDrafter
from specviz.studies.rank_acceptance import head_rank_sequences, measure_ranks
from specviz.engine import costmodel
from specviz.engine.run import run_method
from specviz.engine.session import Session
from specviz.studies.static_check import StaticTreeProbe, check_tree
from specviz.studies.suite import SuiteItem
from specviz.errors import SpecvizError
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.draft_head import DraftHead, HeadNetwork, HeadRecord, target_identity, target_shape
from specviz.runtime.kv import new_cache
from specviz.runtime.loading import load_model
from specviz.tree.draft_tree import ROOT
from specviz.tree.static_tree import (MIN_COUNT, RankAcceptance, StaticTree, best_tree, expected_curve,
                                      expected_speedups)
from specviz.tree.static_tree_export import FORMATS, as_graph, export

SEQUENCES = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 0], [1, 0, 2], [0, 0, 0], [2, 5, 0],
             [0, 1, 0], [0, 0, 9], [1, 0, 0], [0, 0, 1], [0, 3, 0], [1, 1, 1], [0, 0, 0]] * 2


@pytest.fixture
def acceptance():
    return RankAcceptance.from_rank_sequences("test", SEQUENCES, depth=3, max_rank=8)


def test_rank_paths_are_counted_down_to_the_first_rank_out_of_range(acceptance):
    assert acceptance.positions == len(SEQUENCES)
    assert acceptance.counts[(0,)] == 2 * 10 and acceptance.counts[(0, 0)] == 2 * 7
    assert acceptance.counts[(0, 0, 0)] == 2 * 4 and (0, 0, 9) not in acceptance.counts  # rank 9 >= max_rank 8
    low, high = acceptance.interval((0,))
    assert low < acceptance.chance((0,)) < high
    for path, count in acceptance.counts.items():  # a child never outnumbers its parent
        assert len(path) == 1 or count <= acceptance.counts[path[:-1]]


def _closed(paths) -> bool:
    chosen = set(paths)
    return all(len(p) == 1 or p[:-1] in chosen for p in chosen)


def test_the_best_tree_is_the_best_closed_set_of_n_paths(acceptance):
    supported = acceptance.supported()
    for n in range(1, len(supported) + 1):
        tree = best_tree(acceptance, n)
        assert tree.size == n and _closed(tree.paths)
        assert tree.paths == sorted(tree.paths, key=lambda p: (len(p), p))  # breadth-first
        brute = max(sum(acceptance.chance(p) for p in subset)
                    for subset in itertools.combinations(supported, n) if _closed(subset))
        assert tree.expected_accepted == pytest.approx(brute)
        assert expected_curve(acceptance)[n - 1] == pytest.approx(tree.expected_accepted)


def test_more_tokens_than_the_measurements_support_are_refused_with_the_largest_n(acceptance):
    supported = len(acceptance.supported())
    assert all(acceptance.counts[p] >= MIN_COUNT for p in acceptance.supported())
    with pytest.raises(SpecvizError, match=f"support at most {supported} draft tokens"):
        best_tree(acceptance, supported + 1)
    with pytest.raises(SpecvizError, match="at least 1"):
        best_tree(acceptance, 0)


def test_expected_speedup_prices_the_verify_and_the_draft_levels():
    curve, depths = [0.5, 0.8], [1, 2]
    speedups = expected_speedups(curve, lambda q: 10.0 + q, 1.0, depths)
    assert speedups == [pytest.approx(1.5 * 11 / (12 + 1)), pytest.approx(1.8 * 11 / (13 + 2))]


def test_the_tree_exports_as_json_and_graphml(acceptance):
    tree = best_tree(acceptance, 6)
    record = json.loads(export(tree, "json", extra={"drafter": "test"}))
    assert record["paths"] == [list(p) for p in tree.paths]
    assert record["drafter"] == "test" and record["expected_accepted"] == pytest.approx(tree.expected_accepted, abs=1e-4)
    graph = nx.parse_graphml(export(tree, "graphml"))
    assert nx.is_arborescence(graph) and graph.number_of_nodes() == 7
    assert nx.utils.graphs_equal(graph, nx.parse_graphml(export(tree, "graphml")))
    assert graph.nodes["0-0"]["chance"] == pytest.approx(acceptance.chance((0, 0)))
    assert set(as_graph(tree).successors("root")) == {"-".join(map(str, p)) for p in tree.paths if len(p) == 1}
    with pytest.raises(SpecvizError, match="choose one of " + ", ".join(FORMATS)):
        export(tree, "onnx")
    with pytest.raises(SpecvizError, match="choose one of"):  # an engine's text is engine_configs', never a tree's
        export(tree, "vllm")


@pytest.fixture(scope="module")
def tiny(tiny_models):
    return load_model(tiny_models["same"])


SUITE = [SuiteItem.of([{"role": "user", "content": "the cat sat on the mat"}], id="a", category="x"),
         SuiteItem.of([{"role": "user", "content": "a dog ran on the road"}], id="b", category="x")]


def test_the_target_drafting_for_itself_follows_rank_zero_at_every_level(tiny):
    measured = measure_ranks(tiny, tiny, "self", SUITE, depth=3, max_rank=4, max_new_tokens=12)
    acceptance = measured.acceptance
    assert acceptance.positions == 2 * (12 - 3 + 1) and measured.level_ms > 0
    assert [acceptance.chance((0,) * d) for d in (1, 2, 3)] == [1.0, 1.0, 1.0]
    assert best_tree(acceptance, 3).paths == [(0,), (0, 0), (0, 0, 0)]


def test_the_heads_teacher_forced_ranks_are_its_dynamic_trees_child_order(tiny):
    prompt = tiny.tokenizer("the cat sat on the mat and the dog").input_ids
    continuation = run_method(tiny, "ar", prompt_ids=prompt, max_new_tokens=10).output_ids
    # an untrained head whose draft vocabulary holds the continuation's tokens and a few more, so that its
    # dynamic tree at full breadth holds every rank path of two levels
    torch.manual_seed(0)
    draft_ids = torch.tensor(sorted(set(continuation) | set(prompt) | tiny.eos_ids | set(range(5))))
    shape = target_shape(tiny, 32, len(draft_ids))
    head = DraftHead(tiny, HeadNetwork(tiny, shape, draft_ids), HeadRecord(target_identity(tiny), shape))
    sequences, _ = head_rank_sequences(tiny, head, prompt, continuation, depth=2)
    ids = prompt + continuation
    features = causal_forward(tiny, new_cache(tiny.model.config), ids[:-1], True)[1]
    width = len(draft_ids)
    drafter = HeadDrafter(head, breadth=width, expand=width, depth=2, nodes=width + width * width)
    drafter.min_path_chance = 0.0
    drafter.prefill_chunk(ids, 0, None, features)
    checked = 0
    for t, ranks in enumerate(sequences):
        tree = drafter.propose(ids[:len(prompt) + t], 10_000)
        node = ROOT
        for level, rank in enumerate(ranks):
            children = tree.children(node)
            child = tree.child_with_token(node, continuation[t + level])
            if rank < 0:
                assert child is None
                break
            assert children.index(child) == rank
            node, checked = child, checked + 1
    assert checked == 2 * len(sequences)  # both levels of every position: every token is in the draft vocabulary


def test_the_command_prints_the_engines_text_and_refuses_bad_input(tiny, tmp_path, capsys, monkeypatch):
    # a cost curve of its own (calibrating the tiny model is tested elsewhere and would take most of the time)
    curve = costmodel.CostModel(sizes=[1, 2, 4, 8], ms=[1.0, 1.1, 1.2, 1.4], context_len=64, model=tiny.name,
                                device="cpu", dtype="fp32", threads=1)
    monkeypatch.setattr(costmodel, "load_or_calibrate", lambda lm: curve)
    suite = tmp_path / "suite.jsonl"
    suite.write_text("\n".join(json.dumps(item.to_dict()) for item in SUITE))
    common = ["static-tree", "--model", tiny.name, "--drafter", "self", "--suite", str(suite), "--depth", "2",
              "--max-new-tokens", "8"]
    report = tmp_path / "report.json"
    assert main(common + ["--tokens", "2", "--format", "json", "--check", str(suite), "--check-tokens", "1,2,9",
                          "--json", str(report)]) == 0
    out = capsys.readouterr()
    written = json.loads(report.read_text())
    assert [c["tokens"] for c in written["checks"]] == [1, 2] and written["checks"][1]["lossless"]
    assert json.loads(out.out)["paths"] == [[0], [0, 0]]
    # the target drafting for itself is no drafter an engine loads: each says so, Medusa's choices come with a note
    assert "gains nothing" in written["engines"]["vLLM"]["refused"]
    assert written["engines"]["Medusa"]["refused"] is None and not written["engines"]["Medusa"]["problems"]
    assert "expected speedup" in out.err and "check N =   2" in out.err and "lossless yes" in out.err
    assert "check N = 9: more than the 2 tokens the measurements support" in out.err
    assert main(common + ["--format", "onnx"]) == 2
    assert "choose one of vllm, sglang" in capsys.readouterr().err
    assert main(common + ["--tokens", "200", "--format", "json"]) == 2
    assert "support at most 2 draft tokens" in capsys.readouterr().err
    assert main(common + ["--tokens", "two"]) == 2
    assert "--tokens must be a whole number" in capsys.readouterr().err
    from specviz.studies import static_study

    def never(*args, **kwargs):
        raise AssertionError("measured before refusing")

    monkeypatch.setattr(static_study, "study_static_trees", never)  # the target itself: refused before any work
    assert main(common + ["--format", "trtllm"]) == 2
    assert "TensorRT-LLM: TensorRT-LLM drafts with an EAGLE-3 head or a separate draft model" in capsys.readouterr().err


def test_a_static_tree_drafted_in_sessions_is_lossless_and_accepts_what_was_predicted(tiny):
    chain = best_tree(RankAcceptance.from_rank_sequences("self", [[0, 0, 0]] * 5, 3, 4), 3)
    checked = check_tree(tiny, None, chain, SUITE, max_new_tokens=12)
    assert checked.lossless and checked.predicted_accepted == 3.0
    assert checked.measured_accepted >= 2.5  # the target drafting for itself: all but a cut last step accepted
    torch.manual_seed(0)
    draft_ids = torch.tensor(sorted(set(range(300)) | tiny.eos_ids))
    shape = target_shape(tiny, 32, len(draft_ids))
    head = DraftHead(tiny, HeadNetwork(tiny, shape, draft_ids), HeadRecord(target_identity(tiny), shape))
    bushy = StaticTree([(0,), (1,), (2,), (0, 0), (0, 1)], [0.4, 0.2, 0.1, 0.2, 0.1])
    checked = check_tree(tiny, head, bushy, SUITE, max_new_tokens=12)
    assert checked.lossless and checked.steps > 0
    session = Session(tiny, type("Probe", (StaticTreeProbe,), {"paths": bushy.paths}), budget=5, draft=head)
    session.start("the cat sat on the mat")
    record = session.step()
    assert len(record.nodes) == 1 + 5  # the root and exactly the static tree's nodes


def test_the_app_tab_measures_draws_exports_and_refuses_bad_input(tiny, monkeypatch):
    """The Static tree tab's events (panels.static_tree_tab), in this process: a study on the page prompt, the
    tree of any supported N in every text format and as GraphML, and bad values answered with a message."""
    import gradio as gr

    from specviz.lab.public_policy import Policy
    from specviz.lab.static_tree import StaticTreeStudies
    from specviz.panels.static_tree_tab import StaticTreeTab

    curve = costmodel.CostModel(sizes=[1, 2, 4, 8], ms=[1.0, 1.1, 1.2, 1.4], context_len=64, model=tiny.name,
                                device="cpu", dtype="fp32", threads=1)
    monkeypatch.setattr(costmodel, "load_or_calibrate", lambda lm: curve)
    with gr.Blocks():
        tokens = gr.Number(16)
        with gr.Tabs():
            tab = StaticTreeTab(Policy.private(), {"tuning suite": SUITE}, {}, tokens)
    page = {"model": tiny.name, "prompt": "the cat sat on the mat and the dog", "method": "unified", "budget": 8,
            "draft_model": "self"}
    quiet = lambda *args, **kwargs: None  # noqa: E731 (gr.Progress outside an event)
    here = "this machine"
    measured = tab.on_measure(None, "", "tuning suite", 12, 2, "vllm", here, 16, quiet, **page)
    study, size, message = measured[tab.study], measured[tab.size], measured[tab.message]
    assert study.drafter == "self" and study.acceptance.positions > 0 and size["value"] == study.best_tokens
    assert "best N on the cost curve of this machine" in message and "| (0,) |" in measured[tab.table]
    assert "vLLM** cannot take this drafter" in measured[tab.engine_note]  # the page's drafter is the target itself
    # measured with another engine picked: that engine's advice shows
    assert "Medusa**" in tab.on_measure(None, "", "tuning suite", 12, 2, "medusa", here, 16, quiet,
                                        **page)[tab.engine_note]
    assert nx.is_arborescence(nx.read_graphml(measured[tab.graphml]))
    assert len(measured[tab.tree_plot].data[1].x) == study.best_tokens + 1  # the root and every node, by depth
    assert measured[tab.curve_plot].data[2].x == (study.best_tokens,)       # the best N starred
    for fmt, engine in (("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")):
        shown = tab.on_show(None, study, 1, fmt, here)
        assert f"{engine}** cannot take this drafter" in shown[tab.engine_note]
        assert tab.message not in shown  # the study's message is kept
    medusa = tab.on_show(None, study, 1, "medusa", here)
    assert json.loads(medusa[tab.export_text]["value"]) == json.loads(study.engine_advice("Medusa").config_text)
    assert "Predicted" in medusa[tab.engine_note] and "would refuse" not in medusa[tab.engine_note]
    assert "on the cost curve of this machine" in medusa[tab.engine_note]
    # the same measurements priced on the H200's curve: that curve named, its own speedups (nothing measured again)
    gpu = tab.on_show(None, study, 1, "medusa", "h200-specviz-captured-fp32")
    assert "on the cost curve of h200-specviz-captured-fp32 (specviz, NVIDIA H200" in gpu[tab.engine_note]
    assert "h200-specviz-captured-fp32" in gpu[tab.table]
    assert json.loads(tab.on_show(None, study, 1, "json", here)[tab.export_text]["value"])["paths"] == [[0]]
    for n, fmt, cost, expected in ((study.supported + 1, "vllm", here, "between 1 and"),
                                   (1, "onnx", here, "format must be one of"), ("1e9", "vllm", here, "whole number"),
                                   (1, "vllm", "a-laptop", "must be one of this machine, h200")):
        assert expected in tab.on_show(None, study, n, fmt, cost)[tab.message]
    assert "Measure first" in tab.on_show(None, None, 1, "vllm", here)[tab.message]
    for scope, drafter, expected in (("everything", "", "Measure on one of"),
                                     ("page prompt", "eagle:/nowhere", "cannot draft")):
        assert expected in tab.on_measure(None, drafter, scope, 12, 2, "vllm", here, 16, quiet, **page)[tab.message]
    public = StaticTreeTab.__new__(StaticTreeTab)
    public.policy, public.message = Policy.for_public(), tab.message
    public.studies = StaticTreeStudies(public.policy, {"tuning suite": SUITE * 20})
    assert "at most 24 prompts" in public.on_measure(None, "", "tuning suite", 12, 2, "vllm", here, 16, quiet, **{
        **page, "model": ""})[tab.message]


def test_an_engines_dynamic_eagle_rule_drafted_in_sessions_is_lossless_and_keeps_its_shape(tiny):
    """engine_configs' SGLang advice for a head, drafted by EAGLE-2's rule at its settings (studies.static_check): every
    step's tree holds at most its draft tokens and levels, and the sessions emit ar's tokens."""
    from specviz.studies.static_check import EagleRuleProbe, check_engine
    from specviz.engine_configs import sglang
    from specviz.engine_configs.advice import Drafter

    torch.manual_seed(0)
    draft_ids = torch.tensor(sorted(set(range(300)) | tiny.eos_ids))
    shape = target_shape(tiny, 32, len(draft_ids))
    head = DraftHead(tiny, HeadNetwork(tiny, shape, draft_ids), HeadRecord(target_identity(tiny), shape))
    acceptance = RankAcceptance.from_rank_sequences("head", SEQUENCES, depth=3, max_rank=8)
    advice = sglang.advise(Drafter("specviz-head", "head", None), acceptance, lambda q: 1.0 + 0.01 * q, 0.05)
    assert advice.shape.topk > 1 and advice.shape.drafts > advice.shape.steps  # a tree, not a chain
    checked = check_engine(tiny, head, advice, SUITE, max_new_tokens=12)
    assert checked.lossless and checked.steps > 0
    probe = type("Probe", (EagleRuleProbe,), {"steps": 3, "topk": 2, "drafts": 5})
    session = Session(tiny, probe, budget=50, draft=head)  # a budget far above the rule's: the rule alone shapes it
    session.start("the cat sat on the mat")
    for _ in range(3):
        nodes = session.step().nodes[1:]
        assert len(nodes) == 5 and max(node.depth for node in nodes) <= 3
        children: dict[int, int] = {}
        for node in nodes:
            children[node.parent] = children.get(node.parent, 0) + 1
        assert max(children.values()) <= 2  # top-2 children of a node
        for depth in (1, 2):  # at most the best 2 of a level were expanded
            assert sum(1 for node in nodes if node.depth == depth and node.id in children) <= 2
    assert check_engine(tiny, None, sglang.advise(Drafter("self", "self", None), acceptance, lambda q: 1.0, 0.05),
                        SUITE, 12) is None  # refused: nothing to draft
