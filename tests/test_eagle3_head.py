"""The EAGLE-3-shaped head trained here (`train-head --shape eagle3`, runtime.trained_eagle3) and its export for the
engines (engine_configs.speculators_export): a tiny one trains on an eight-layer target in seconds, drafts as
`head-eagle3` for every method that takes a model drafter losslessly, the runtime's forward is the trained
network's, a head for another target is refused, and the exported folders carry the engines' names. The
round trip through the speculators package's own loader is tests/test_engines_own_code.py."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from specviz.engine.session import Session
from specviz.errors import SpecvizError
from specviz.runtime.draft_head import MissingHead, target_shape
from specviz.runtime.eagle_head import EagleHead
from specviz.runtime.draft_model_spec import resolve_draft
from specviz.runtime.trained_eagle3 import EAGLE3_SPEC, eagle3_folder, shown_path
from specviz.engine_configs.speculators_export import Verifier, export_head
from specviz.training.train_eagle3 import drafting_view, eagle3_layers, eagle3_network
from specviz.training.train_head import EAGLE3_SHAPE, TrainConfig, train

from test_head import TINY_CONFIG

EAGLE3_TINY = replace(TINY_CONFIG, unroll=3, questions=12, head_shape=EAGLE3_SHAPE)
PROMPTS = [[{"role": "user", "content": "Name three colours and say why you like them."}],
           [{"role": "user", "content": "def add(a, b):\n    return a + b\n\nRename add to plus."}]]


def fused_features(lm, text: str) -> tuple[torch.Tensor, torch.Tensor]:
    """text's token ids (1, n) and the target's fused EAGLE-3 features (1, n, 3 hidden) at every position."""
    ids = lm.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        out = lm.model.get_decoder()(input_ids=ids, output_hidden_states=True)
    return ids, torch.cat([out.hidden_states[i] for i in eagle3_layers(lm)], -1)


def trained_network(lm, folder: Path):
    """The training network with the weights of the head trained into folder."""
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    draft_ids = torch.arange(len(weights["d2t"])) + weights["d2t"]
    network = eagle3_network(lm, target_shape(lm, EAGLE3_TINY.intermediate, len(draft_ids)), draft_ids,
                             torch.ones(lm.model.config.hidden_size))
    network.load_state_dict({k: v for k, v in weights.items() if k not in ("d2t", "t2d")})
    return network


@pytest.fixture(scope="module")
def trained(layered_target):
    """The tiny head trained into the target's cache folder (SPECVIZ_HEADS, a test folder), and its report."""
    return train(layered_target, EAGLE3_TINY)


def test_a_tiny_eagle3_head_trains_into_eagle3s_layout_and_loads_by_name(layered_target, trained):
    folder = Path(trained.path)
    assert folder == eagle3_folder(layered_target) and trained.steps > 0
    assert len(trained.top1_by_depth) == 3 and trained.conversations["python-questions"] > 0
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 384
    assert config["target_hidden_size"] == 32 and config["tie_word_embeddings"] is False
    head = resolve_draft(layered_target, EAGLE3_SPEC, None)
    assert isinstance(head, EagleHead) and head.name == EAGLE3_SPEC
    assert head.feature_tap.layers == eagle3_layers(layered_target) == (2, 4, 5)
    assert len(head.draft_ids_list) == 384 and set(layered_target.eos_ids) <= set(head.draft_ids_list)


@pytest.mark.parametrize("method,params", [("unified", {"model_stage": "on"}), ("reader", {}), ("respec", {})])
def test_every_method_drafting_with_the_eagle3_head_is_lossless(layered_target, trained, method, params):
    head = resolve_draft(layered_target, EAGLE3_SPEC, None)
    for prompt in PROMPTS:
        reference = Session(layered_target, "ar").start(prompt)
        reference.run(20)
        session = Session(layered_target, method, params, budget=12, draft=head).start(prompt)
        session.run(20)
        assert session.output_ids == reference.output_ids


def test_the_runtime_forward_is_the_trained_networks(layered_target, trained):
    """The head as the drafter runs it (runtime.eagle_head, from the files) gives the logits the training network
    gives for the same tokens and fused features, position t pairing token t with the feature at t - 1."""
    lm = layered_target
    network = trained_network(lm, Path(trained.path))
    ids, fused = fused_features(lm, "def add(a, b):\n    return a + b\n\nprint(add(2, 3))")
    n = ids.shape[1]
    with torch.no_grad():
        h = network.step(lm.model.get_input_embeddings()(ids).float(), F.pad(fused[:, :-1], (0, 0, 1, 0)),
                         torch.arange(n)[None], drafting_view(n, 0), [])
        trained_logits = network.draft_logits(h)[0, 1:]
    head = resolve_draft(lm, EAGLE3_SPEC, None)
    logits, _ = head.forward(fused[0, :-1], ids[0, 1:].tolist(), list(range(1, n)),
                             torch.ones(n - 1, n - 1, dtype=torch.bool).tril(), head.new_cache())
    assert torch.allclose(logits, trained_logits, atol=1e-5)


def test_an_eagle3_head_for_another_target_or_none_is_refused_with_a_sentence(lm, layered_target, trained,
                                                                          monkeypatch, tmp_path):
    missing = resolve_draft(lm, EAGLE3_SPEC, None)   # none trained for the default model in the test folder
    assert isinstance(missing, MissingHead) and "train-head --shape eagle3" in missing.reason
    # the tiny target's head copied to where the default model's would be: refused by its record
    import shutil

    monkeypatch.setenv("SPECVIZ_HEADS", str(tmp_path))
    shutil.copytree(trained.path, eagle3_folder(lm))
    foreign = resolve_draft(lm, EAGLE3_SPEC, None)
    assert isinstance(foreign, MissingHead) and "trained for another model" in foreign.reason


def test_the_target_must_have_three_distinct_layers_to_fuse(tiny_models):
    from specviz.runtime.loading import load_model

    with pytest.raises(SpecvizError, match="too few for three distinct ones"):
        train(load_model(tiny_models["same"]), EAGLE3_TINY)


def test_the_speculators_export_has_the_names_vllm_and_speculators_read(layered_target, trained, tmp_path):
    from safetensors import safe_open

    verifier = Verifier("owner/target", ("LlamaForCausalLM",), (2, 4, 5))
    out = tmp_path / "spec"
    embedding = layered_target.model.get_input_embeddings().weight
    export_head(Path(trained.path), out, "speculators", verifier, speculative_tokens=4, dtype="bfloat16",
                embedding=embedding)
    config = json.loads((out / "config.json").read_text())
    assert "model_type" not in config   # vLLM recognises the format by its absence
    assert config["speculators_model_type"] == "eagle3" and config["norm_before_residual"] is False
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5] and config["draft_vocab_size"] == 384
    layer = config["transformer_layer_config"]
    assert layer["model_type"] == "llama" and layer["num_hidden_layers"] == 1 and layer["head_dim"] == 8
    assert layer["tie_word_embeddings"] is False and layer["vocab_size"] == layered_target.vocab_size
    proposal = config["speculators_config"]
    assert proposal["proposal_methods"][0] == {"proposal_type": "greedy", "speculative_tokens": 4,
                                               "verifier_accept_k": 1, "accept_tolerance": 0.0}
    assert proposal["verifier"] == {"name_or_path": "owner/target", "architectures": ["LlamaForCausalLM"]}
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.metadata() == {"format": "pt"}
        assert f.get_tensor("d2t").dtype == torch.int64 and f.get_tensor("t2d").dtype == torch.bool
        assert f.get_tensor("fc.weight").dtype == torch.bfloat16 and int(f.get_tensor("t2d").sum()) == 384
        assert torch.equal(f.get_tensor("embed_tokens.weight"), embedding.detach().to(torch.bfloat16))
    assert "layers.0.hidden_norm.weight" in keys and "layers.0.self_attn.q_proj.weight" in keys
    assert not any(k.startswith("midlayer.") for k in keys)
    assert {"fc.weight", "norm.weight", "lm_head.weight"} <= keys


def test_the_engines_default_layers_are_left_to_them(trained, tmp_path):
    """Explicit ids are read differently (vLLM: inputs of those layers; SGLang adds one), the default alike."""
    verifier = Verifier("owner/target", ("LlamaForCausalLM",), (2, 4, 5), default_aux_layers=(2, 4, 5))
    export_head(Path(trained.path), tmp_path / "spec", "speculators", verifier)
    assert "eagle_aux_hidden_state_layer_ids" not in json.loads((tmp_path / "spec" / "config.json").read_text())


def test_the_eagle3_export_is_the_folder_sglang_loads_and_bad_requests_are_refused(trained, tmp_path):
    verifier = Verifier("owner/target", ("LlamaForCausalLM",), (2, 4, 5))
    written = export_head(Path(trained.path), tmp_path / "e3", "eagle3", verifier)
    assert sorted(p.name for p in written) == ["config.json", "model.safetensors"]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(SpecvizError, match="not an empty folder"):
        export_head(Path(trained.path), tmp_path / "full", "speculators", verifier)
    with pytest.raises(SpecvizError, match="1 to 64"):
        export_head(Path(trained.path), tmp_path / "k", "speculators", verifier, speculative_tokens=0)


def test_export_head_command_refuses_a_head_that_is_not_eagle3(tmp_path):
    done = subprocess.run([sys.executable, "-m", "specviz", "export-head", "--draft-model", "head",
                           "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Only EAGLE-3 heads export" in done.stderr and "Traceback" not in done.stderr


def test_the_engines_are_told_where_the_eagle3_head_lies_and_how_to_export_it(layered_target, trained):
    from specviz.studies.static_study import drafter_for_engines
    from specviz.engine_configs import sglang, vllm
    from specviz.tree.static_tree import RankAcceptance

    head = resolve_draft(layered_target, EAGLE3_SPEC, None)
    drafter = drafter_for_engines(layered_target, head, EAGLE3_SPEC)
    assert (drafter.kind, drafter.location) == ("eagle3", shown_path(eagle3_folder(layered_target)))
    acceptance = RankAcceptance.from_rank_sequences("t", [[0, 0], [0, 1], [1, 0], [0, 0]] * 4, depth=2, max_rank=4)
    cost = lambda tokens: 10.0 + tokens  # noqa: E731
    chain = vllm.advise(drafter, acceptance, cost, 0.5)
    assert json.loads(chain.config_text)["model"] == drafter.location and not chain.problems
    assert any("export-head --format speculators" in note for note in chain.notes)
    tree = sglang.advise(drafter, acceptance, cost, 0.5)
    assert drafter.location in tree.config_text and any("--format eagle3" in note for note in tree.notes)


def test_a_public_space_offers_the_eagle3_head_only_where_one_is_trained(monkeypatch, tmp_path):
    from specviz.lab.public_policy import Policy
    from specviz.runtime.loading import DEFAULT_MODEL
    from specviz.runtime.trained_eagle3 import eagle3_folder_name

    monkeypatch.setenv("SPECVIZ_HEADS", str(tmp_path))
    assert EAGLE3_SPEC not in Policy.for_public().drafts
    (tmp_path / eagle3_folder_name(DEFAULT_MODEL)).mkdir()
    (tmp_path / eagle3_folder_name(DEFAULT_MODEL) / "model.safetensors").write_bytes(b"x")
    assert EAGLE3_SPEC in Policy.for_public().drafts


def test_an_ab_side_names_the_head_it_drafts_with(layered_target, trained):
    from specviz.render.compare_view import side_summary

    head = resolve_draft(layered_target, EAGLE3_SPEC, None)
    session = Session(layered_target, "reader", {}, budget=8, draft=head).start(PROMPTS[0])
    session.run(4)
    assert "draft model head-eagle3" in side_summary(session, "B")
    assert "draft model self" in side_summary(Session(layered_target, "ar").start(PROMPTS[0]), "A")


def test_the_second_training_step_is_what_the_drafter_does_at_depth_two(layered_target, trained):
    """Step 1 of the training-time test at position t (token t, the step-0 output at t - 1, the true keys up to
    t - 1) is the drafter's depth-2 node: the context fed up to t - 1, then token t on the root's own feature."""
    lm = layered_target
    network = trained_network(lm, Path(trained.path))
    ids, fused = fused_features(lm, "Name three colours and say why you like them, please.")
    n = ids.shape[1]
    embeds = lm.model.get_input_embeddings()(ids).float().detach()
    with torch.no_grad():
        past: list = []
        h0 = network.step(embeds, F.pad(fused[:, :-1], (0, 0, 1, 0)), torch.arange(n)[None], drafting_view(n, 0), past)
        h1 = network.step(embeds, F.pad(h0[:, :-1], (0, 0, 1, 0)), torch.arange(n)[None], drafting_view(n, 1), past)
        trained_logits = network.draft_logits(h1)[0, n - 1]
    head = resolve_draft(lm, EAGLE3_SPEC, None)
    cache = head.new_cache()
    _, features = head.forward(fused[0, :n - 2], ids[0, 1:n - 1].tolist(), list(range(1, n - 1)),
                               torch.ones(n - 2, n - 2, dtype=torch.bool).tril(), cache)
    logits, _ = head.forward(features[-1:], [int(ids[0, n - 1])], [n - 1], torch.ones(1, n - 1, dtype=torch.bool),
                             cache)
    assert torch.allclose(logits[0], trained_logits, atol=1e-5)
