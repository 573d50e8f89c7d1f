"""What each serving engine is told (specviz/engine_configs): EAGLE-2's dynamic tree as SGLang and TensorRT-LLM build
it, against a brute-force reading of the rule; each engine's choice of knobs against every setting tried; every printed
config through that engine's validation rules (as read from its code), and configs the engines refuse."""

import itertools
import json

import pytest

from specviz.engine_configs import ENGINES, medusa, sglang, trtllm, vllm
from specviz.engine_configs.advice import Drafter, chain_accepted, step_speedup
from specviz.engine_configs.eagle_tree import MOST_TOKENS, dynamic_tree, plan, pool_size
from specviz.tree.static_tree import RankAcceptance, best_tree

SEQUENCES = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 0], [1, 0, 2], [0, 0, 0], [2, 5, 0],
             [0, 1, 0], [0, 0, 9], [1, 0, 0], [0, 0, 1], [0, 3, 0], [1, 1, 1], [0, 0, 0], [0, 2, 0]] * 3 + [[4, 4]]
HEAD = Drafter("eagle3", "eagle:some/eagle3-head", "some/eagle3-head")


def verify_ms(tokens: int) -> float:  # a CPU-like curve: flat to 4 tokens, then steeper
    return 10.0 + max(0, tokens - 4) * 1.5


@pytest.fixture
def acceptance():
    return RankAcceptance.from_rank_sequences("test", SEQUENCES, depth=3, max_rank=8)


def test_the_dynamic_tree_expands_only_the_best_k_of_each_level(acceptance):
    chance = acceptance.supported_chance  # a path followed fewer than 3 times counts 0
    assert chance((4,)) == 0 < acceptance.chance((4,))
    # k = 1: the chain of the drafter's best token
    assert dynamic_tree(acceptance, 3, 1, 3).paths == [(0,), (0, 0), (0, 0, 0)]
    # k = 2, S = 2: level 1 is ranks 0 and 1; level 2 holds all four of their children; the best 3 of that pool
    pool = [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
    expected = sorted(pool, key=lambda p: (-chance(p), len(p), p))[:3]
    assert dynamic_tree(acceptance, 2, 2, 3).paths == sorted(expected, key=lambda p: (len(p), p))
    # S = 3, k = 2: only the best 2 of level 2 are expanded, so a level-3 child of another node never appears
    tree = dynamic_tree(acceptance, 3, 2, pool_size(3, 2))
    level2 = sorted([p for p in pool if len(p) == 2], key=lambda p: (-chance(p), len(p), p))[:2]
    assert {p[:2] for p in tree.paths if len(p) == 3} <= set(level2)
    assert len(tree.paths) == pool_size(3, 2) == 2 + 2 * 4
    # a wide enough rule keeps what the unconstrained best tree keeps
    for n in range(1, len(acceptance.supported()) + 1):
        assert dynamic_tree(acceptance, 3, 8, n).expected_accepted == pytest.approx(
            best_tree(acceptance, n).expected_accepted)


def test_sglangs_choice_is_the_best_setting_its_rule_allows(acceptance):
    steps, topk, tokens, accepted = plan(acceptance, verify_ms, 0.5)
    tried = []
    for s, k in itertools.product(range(1, 4), range(1, 9)):
        for n in range(2, min(MOST_TOKENS, pool_size(s, k) + 1) + 1):
            if k == 1 and n != s + 1:
                continue
            got = dynamic_tree(acceptance, s, k, n - 1).expected_accepted
            tried.append((step_speedup(got, n, s, verify_ms, 0.5), s, k, n, got))
    best = max(tried)
    assert step_speedup(accepted, tokens, steps, verify_ms, 0.5) == pytest.approx(best[0])
    assert accepted == pytest.approx(dynamic_tree(acceptance, steps, topk, tokens - 1).expected_accepted)


def test_every_engines_config_passes_its_own_rules(acceptance):
    greedy = [(list(range(30)) * 2, list(range(30)))]  # llama.cpp's n-gram rules draft along greedy continuations
    for engine, module in ENGINES.items():
        advice = (module.advise(HEAD, acceptance, verify_ms, 0.5, greedy=greedy)
                  if getattr(module, "NEEDS_GREEDY", False) else module.advise(HEAD, acceptance, verify_ms, 0.5))
        assert advice.engine == engine and advice.refused is None and advice.problems == (), advice
        if engine == "llama.cpp":  # its speedup is the simulation's (tests/test_llamacpp_rules.py)
            continue
        assert advice.predicted_speedup == pytest.approx(step_speedup(
            advice.predicted_accepted, advice.verified_tokens, dict(advice.knobs).get(
                "num_speculative_tokens", dict(advice.knobs).get("speculative-num-steps", dict(advice.knobs).get(
                    "max_draft_len", 1))), verify_ms, 0.5))
    config = json.loads(vllm.advise(HEAD, acceptance, verify_ms, 0.5).config_text)
    k = config["num_speculative_tokens"]
    assert config == {"method": "eagle3", "model": "some/eagle3-head", "num_speculative_tokens": k}
    assert k == max(range(1, 4), key=lambda n: step_speedup(chain_accepted(acceptance, n), n + 1, n, verify_ms, 0.5))
    text = sglang.advise(HEAD, acceptance, verify_ms, 0.5).config_text
    odd = Drafter("eagle3", "eagle:my heads/x: y", "my heads/x: y")  # a path with a space and a colon
    assert "--speculative-draft-model-path 'my heads/x: y'" in sglang.advise(odd, acceptance, verify_ms, 0.5).config_text
    assert '  speculative_model: "my heads/x: y"\n' in trtllm.advise(odd, acceptance, verify_ms, 0.5).config_text
    assert "--speculative-algorithm EAGLE3 \\\n  --speculative-draft-model-path some/eagle3-head \\\n" in text
    yaml = trtllm.advise(HEAD, acceptance, verify_ms, 0.5).config_text
    assert yaml.startswith('speculative_config:\n  decoding_type: "Eagle3"\n') and "eagle_choices" not in yaml
    choices = json.loads(medusa.advise(HEAD, acceptance, verify_ms, 0.5).config_text)["medusa_choices"]
    assert all(max(path) < medusa.TOPK and len(path) <= medusa.DEFAULT_HEADS for path in choices)


def test_the_engines_rules_refuse_what_their_code_refuses():
    assert any("speculative_token_tree" in p for p in vllm.validate(
        {"method": "eagle", "model": "m", "num_speculative_tokens": 3, "speculative_token_tree": "[(0,)]"}))
    assert vllm.validate({"method": "eagle3", "num_speculative_tokens": 3}) == [
        "num_speculative_tokens was provided but without speculative model."]
    assert vllm.validate({"method": "ngram", "num_speculative_tokens": 0, "prompt_lookup_min": 5,
                          "prompt_lookup_max": 2}) == ["Expected num_speculative_tokens to be greater than zero (0).",
                                                       "prompt_lookup_min=5 must be <= prompt_lookup_max=2"]
    assert vllm.validate({"method": "ngram", "num_speculative_tokens": 4}) == []
    flags = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "h", "speculative-num-steps": 3,
             "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 8}
    assert "adjusted to speculative_num_steps + 1" in sglang.validate(flags)[0]
    assert "21 draft tokens is more than the 10 nodes" in sglang.validate({**flags, "speculative-eagle-topk": 2,
                                                        "speculative-num-draft-tokens": 22})[0]
    assert "go together" in sglang.validate({"speculative-algorithm": "EAGLE", "speculative-draft-model-path": "h",
                                             "speculative-num-steps": 3})[0]
    dynamic = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "h", "use_dynamic_tree": True,
               "dynamic_tree_max_topK": 2, "max_total_draft_tokens": 7}
    assert trtllm.validate(dynamic) == ["max_total_draft_tokens (7) must be in [max_draft_len (3), "
                                        "dynamic_tree_max_topK * max_draft_len (6)]"]
    assert "Draft model must be provided for EAGLE" in trtllm.validate({"decoding_type": "Eagle3", "max_draft_len": 2})
    assert any("release 1.4" in p for p in trtllm.validate({"decoding_type": "Eagle3", "max_draft_len": 2,
                                                            "speculative_model": "h", "eagle_choices": [[0]]}))
    assert medusa.validate([[0], [10], [0, 0, 0, 0, 0, 0], [3, 1]], heads=5) == [
        "[10]: a rank of 10 or more reads the next head's candidates (TOPK = 10)",
        "[0, 0, 0, 0, 0, 0]: deeper than the model's 5 Medusa heads",
        "[0, 0, 0, 0, 0, 0]: its prefix [0, 0, 0, 0, 0] is not in the tree",
        "[3, 1]: its prefix [3] is not in the tree"]


def test_drafters_no_engine_loads_are_refused_with_the_alternative(acceptance):
    for kind in ("self", "self-skip"):
        for module in (vllm, sglang, trtllm):
            advice = module.advise(Drafter(kind, kind, None), acceptance, verify_ms, 0.5)
            assert advice.refused and advice.config_text == "", (module.ENGINE, kind)
    ours = vllm.advise(Drafter("specviz-head", "head", None), acceptance, verify_ms, 0.5)
    assert ours.refused is None and "own file format" in " ".join(ours.notes)
    assert "EAGLE-1/2" in trtllm.advise(Drafter("eagle", "eagle:old", "old"), acceptance, verify_ms, 0.5).refused
    assert json.loads(vllm.advise(Drafter("eagle", "eagle:old", "old"), acceptance, verify_ms, 0.5).config_text)[
        "method"] == "eagle"
    draft = trtllm.advise(Drafter("draft-model", "some/small-model", "some/small-model"), acceptance, verify_ms, 0.5)
    assert 'decoding_type: "DraftTarget"' in draft.config_text and "use_dynamic_tree" not in draft.config_text


def test_a_deployments_cost_file_is_checked_and_the_shipped_ones_say_where_they_were_measured():
    from specviz.engine import deployment_cost
    from specviz.errors import SpecvizError

    shipped = deployment_cost.shipped("smollm2-135m-instruct")
    assert {"h200-specviz-captured-fp32", "h200-specviz-captured-bf16"} <= set(shipped)
    for cost in shipped.values():
        assert cost.sizes[0] == 1 and {"date", "command", "source"} <= set(cost.provenance)
        assert deployment_cost.parse(cost.to_dict()) == cost
    good = shipped["h200-specviz-captured-fp32"].to_dict()
    for change, expected in (({"sizes": [2, 4], "ms": [1.0, 2.0]}, "ascending from 1"),
                             ({"ms": [float("nan")] * 8}, "positive milliseconds"),
                             ({"ms": [1.0]}, "the same length"), ({"sizes": [1, True, 3], "ms": [1, 2, 3]}, "whole"),
                             ({"draft_level_ms": "fast"}, "draft_level_ms"), ({"engine": ""}, "\"engine\""),
                             ({"gpu": "yes"}, "unknown field"), ({"provenance": {"a": [1]}}, "provenance")):
        with pytest.raises(SpecvizError, match=expected):
            deployment_cost.parse({**good, **change})
    with pytest.raises(SpecvizError, match="JSON object"):
        deployment_cost.parse([1, 2])
    flat = deployment_cost.parse(good)
    assert flat.cost_ms(1) == 6.47 and flat.cost_ms(64) == 8.50 and 8.28 < flat.cost_ms(48) < 8.50


def test_on_a_gpus_flat_curve_the_engines_draft_deeper_than_on_a_cpus_and_say_whose_curve_it_was(acceptance):
    """The same measured acceptance priced on a CPU-like curve (verify_ms above) and on the H200's nearly flat one:
    vLLM's chain and SGLang's tree grow where verifying more costs little, and every advice names its curve."""
    from specviz.engine import deployment_cost
    from specviz.studies.static_study import advise_engines

    cpu = deployment_cost.DeploymentCost("cpu-like", "m", "specviz", "cpu", "fp32", (1, 4, 8, 16, 64),
                                         tuple(verify_ms(n) for n in (1, 4, 8, 16, 64)), 2.0)
    gpu = deployment_cost.shipped()["h200-specviz-captured-fp32"]
    on_cpu = advise_engines(HEAD, acceptance, cpu, 2.0, cpu)
    on_gpu = advise_engines(HEAD, acceptance, gpu, gpu.level_ms(2.0, cpu), cpu)
    cpu_chain = dict(on_cpu["vLLM"].knobs)["num_speculative_tokens"]
    gpu_chain = dict(on_gpu["vLLM"].knobs)["num_speculative_tokens"]
    assert gpu_chain >= cpu_chain and on_gpu["SGLang"].verified_tokens >= on_cpu["SGLang"].verified_tokens
    assert (gpu_chain, on_gpu["SGLang"].verified_tokens) != (cpu_chain, on_cpu["SGLang"].verified_tokens)
    assert all(a.priced_on.startswith("h200-specviz-captured-fp32 (specviz, NVIDIA H200, fp32")
               for a in on_gpu.values() if not a.refused)
    assert all(a.priced_on.startswith("cpu-like") for a in on_cpu.values() if not a.refused)
    bf16 = deployment_cost.shipped()["h200-specviz-captured-bf16"]  # no drafter level measured there: scaled, and said
    assert bf16.level_ms(2.0, cpu) == pytest.approx(2.0 * 3.48 / verify_ms(1))
    assert any("gives no drafter level's cost" in note
               for note in advise_engines(HEAD, acceptance, bf16, 0.7, cpu)["SGLang"].notes)
