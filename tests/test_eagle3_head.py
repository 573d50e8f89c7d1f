"""The EAGLE-3-shaped head trained here (`train-head --shape eagle3`, runtime.trained_eagle3) and its export for the
engines (engine_configs.speculators_export): a tiny one trains on an eight-layer target in seconds, drafts as
`head-eagle3` for every method that takes a model drafter losslessly, the runtime's forward is the trained
network's, a head for another target is refused, and the exported folders carry the engines' names. The shipped
copy (float16, no lm_head: the target's rows) drafts as the folder it was copied from, is found after the cache's,
and exports whole, on the default model from a fresh clone's files too. The round trip through the speculators
package's own loader is tests/test_engines_own_code.py."""

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


def nothing_shipped(monkeypatch, tmp_path):
    """As if the repository shipped no trained files (assets/trained) and no bundle lay beside it."""
    monkeypatch.setattr("specviz.runtime.shipped.TRAINED", tmp_path / "nothing-trained")
    monkeypatch.setenv("SPECVIZ_SHIPPED", str(tmp_path / "nothing-shipped"))


def test_an_eagle3_head_for_another_target_or_none_is_refused_with_a_sentence(lm, layered_target, trained,
                                                                          monkeypatch, tmp_path):
    nothing_shipped(monkeypatch, tmp_path)
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


def test_a_public_space_offers_the_eagle3_head_only_where_one_is_trained_or_shipped(monkeypatch, tmp_path):
    from specviz.lab.public_policy import Policy
    from specviz.runtime.loading import DEFAULT_MODEL
    from specviz.runtime.trained_eagle3 import eagle3_folder_name

    monkeypatch.setenv("SPECVIZ_HEADS", str(tmp_path))
    assert EAGLE3_SPEC in Policy.for_public().drafts   # the repository's own (assets/trained)
    nothing_shipped(monkeypatch, tmp_path)
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


# ---- the shipped copy: float16, its lm_head the target's rows -------------------------------------------------
@pytest.fixture(scope="module")
def shipped_copy(layered_target, trained, tmp_path_factory):
    """The tiny head copied as the repository ships one (deploy.trained_files), in a folder of its own."""
    from specviz.deploy.trained_files import shipped_eagle3_copy

    return shipped_eagle3_copy(layered_target, Path(trained.path), tmp_path_factory.mktemp("shipped") / "tiny.eagle3")


def test_the_shipped_copy_is_float16_without_lm_head_and_drafts_as_the_trained_folder(layered_target, trained,
                                                                                     shipped_copy):
    from safetensors import safe_open

    from specviz.runtime.eagle_files import LM_HEAD_METADATA, TARGET_ROWS
    from specviz.runtime.eagle_head import load_eagle

    lm = layered_target
    with safe_open(str(shipped_copy / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.metadata()[LM_HEAD_METADATA] == TARGET_ROWS and "specviz" in f.metadata()
        assert all(f.get_tensor(k).dtype == torch.float16 for k in keys - {"d2t", "t2d"})
    assert "lm_head.weight" not in keys and {"fc.weight", "norm.weight", "d2t", "t2d"} <= keys
    assert json.loads((shipped_copy / "config.json").read_text())["torch_dtype"] == "float16"
    full, slim = load_eagle(lm, str(trained.path)), load_eagle(lm, str(shipped_copy))
    ids, fused = fused_features(lm, "def add(a, b):\n    return a + b")
    n = ids.shape[1]
    visible = torch.ones(n - 1, n - 1, dtype=torch.bool).tril()
    expected, _ = full.forward(fused[0, :-1], ids[0, 1:].tolist(), list(range(1, n)), visible, full.new_cache())
    logits, _ = slim.forward(fused[0, :-1], ids[0, 1:].tolist(), list(range(1, n)), visible, slim.new_cache())
    assert torch.equal(slim.draft_ids_cpu, full.draft_ids_cpu)
    assert float((logits - expected).abs().max()) < 1e-2 * float(expected.abs().max())   # float16's rounding only
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


def test_a_folder_without_lm_head_is_refused_unless_specviz_wrote_it_so(layered_target, trained, shipped_copy,
                                                                       tmp_path):
    from safetensors.torch import load_file, save_file

    from specviz.deploy.trained_files import shipped_eagle3_copy
    from specviz.runtime.eagle_files import read_eagle

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text((shipped_copy / "config.json").read_text())
    save_file(load_file(str(shipped_copy / "model.safetensors")), str(foreign / "model.safetensors"),
              metadata={"format": "pt"})   # the same weights, without specviz's word that lm_head is the target's
    refused = resolve_draft(layered_target, f"eagle:{foreign}", None)
    assert isinstance(refused, MissingHead) and "lacks lm_head.weight" in refused.reason
    config = layered_target.model.config
    with pytest.raises(SpecvizError, match="rows, which were not given"):
        read_eagle(str(shipped_copy), 32, layered_target.vocab_size, int(config.num_hidden_layers))
    # a head whose lm_head moved away from the target's rows does not ship without it
    weights = load_file(str(Path(trained.path) / "model.safetensors"))
    weights["lm_head.weight"] = weights["lm_head.weight"] * 1.5
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "config.json").write_text((Path(trained.path) / "config.json").read_text())
    from safetensors import safe_open

    with safe_open(str(Path(trained.path) / "model.safetensors"), "pt") as f:
        metadata = f.metadata()
    save_file(weights, str(moved / "model.safetensors"), metadata=metadata)
    with pytest.raises(SpecvizError, match="not .* own output rows"):
        shipped_eagle3_copy(layered_target, moved, tmp_path / "copy.eagle3")


def test_head_eagle3_reads_the_cache_first_then_the_shipped_copy(layered_target, trained, shipped_copy, monkeypatch,
                                                                 tmp_path):
    import shutil

    from specviz.runtime.shipped import HEADS
    from specviz.runtime.trained_eagle3 import eagle3_folder_name, eagle3_location
    from specviz.studies.static_study import drafter_for_engines
    from specviz.engine_configs import vllm
    from specviz.tree.static_tree import RankAcceptance

    lm = layered_target
    repository = tmp_path / "trained"
    shutil.copytree(shipped_copy, repository / HEADS / eagle3_folder_name(lm.name))
    monkeypatch.setattr("specviz.runtime.shipped.TRAINED", repository)
    assert eagle3_location(lm) == Path(trained.path)   # trained here: the cache's
    monkeypatch.setenv("SPECVIZ_HEADS", str(tmp_path / "empty"))
    assert eagle3_location(lm) == repository / HEADS / eagle3_folder_name(lm.name)
    head = resolve_draft(lm, EAGLE3_SPEC, None)
    assert isinstance(head, EagleHead) and head.name == EAGLE3_SPEC
    # the engines cannot load the shipped folder (no lm_head): the config names a placeholder, the note export-head
    drafter = drafter_for_engines(lm, head, EAGLE3_SPEC)
    assert drafter.location is None
    acceptance = RankAcceptance.from_rank_sequences("t", [[0, 0], [0, 1], [1, 0], [0, 0]] * 4, depth=2, max_rank=4)
    chain = vllm.advise(drafter, acceptance, lambda tokens: 10.0 + tokens, 0.5)
    assert json.loads(chain.config_text)["model"] == "PATH/TO/EAGLE3-HEAD"
    assert any("leaves out its lm_head" in note and "export-head --format speculators" in note for note in chain.notes)


@pytest.mark.parametrize("format", ["speculators", "eagle3"])
def test_the_shipped_copy_exports_whole_with_the_targets_rows(layered_target, shipped_copy, tmp_path, format):
    from safetensors import safe_open

    from specviz.runtime.eagle_head import load_eagle

    lm = layered_target
    out = tmp_path / format
    export_head(shipped_copy, out, format, Verifier("owner/target", ("LlamaForCausalLM",), (2, 4, 5)),
                dtype="float32", embedding=lm.model.get_input_embeddings().weight,
                output_embedding=lm.model.get_output_embeddings().weight)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        d2t = f.get_tensor("d2t")
        rows = lm.model.get_output_embeddings().weight.detach()[torch.arange(len(d2t)) + d2t]
        assert torch.equal(f.get_tensor("lm_head.weight"), rows)
        assert f.get_tensor("fc.weight").dtype == torch.float32
    if format == "eagle3":   # a whole EAGLE-3 folder again: it loads as eagle:PATH, no word needed
        assert json.loads((out / "config.json").read_text())["torch_dtype"] == "float32"
        assert isinstance(load_eagle(lm, str(out)), EagleHead)
    with pytest.raises(SpecvizError, match="rows, which were not given"):
        export_head(shipped_copy, tmp_path / "again", format, Verifier("o/t", ("LlamaForCausalLM",), (2, 4, 5)))


# ---- the default model's, as the repository ships it ------------------------------------------------------
def test_the_repository_ships_the_default_models_eagle3_head_under_10_mb_with_its_card(lm):
    from safetensors import safe_open

    from specviz.deploy.trained_files import CARD, EAGLE3_SECTION, MAX_BYTES
    from specviz.runtime.shipped import HEADS, TRAINED
    from specviz.runtime.trained_eagle3 import eagle3_folder_name, read_eagle3_record

    folder = TRAINED / HEADS / eagle3_folder_name(lm.name)
    weights = folder / "model.safetensors"
    assert weights.is_file() and (folder / "config.json").is_file(), "assets/trained lacks the EAGLE-3 head"
    assert MAX_BYTES == 10_000_000 and weights.stat().st_size <= MAX_BYTES
    with safe_open(str(weights), "pt") as f:
        keys = set(f.keys())
        assert all(f.get_tensor(k).dtype == torch.float16 for k in keys - {"d2t", "t2d"})
    assert "lm_head.weight" not in keys
    record = read_eagle3_record(folder)
    assert record.training["config"]["unroll"] == 3 and record.training["report"]["top1_by_depth"][0] > 0.3
    card = (TRAINED / CARD).read_text()
    section = card[card.index(EAGLE3_SECTION):]
    for needed in ("train-head --shape eagle3", "--intermediate", "torch", "Corpus", "heldout.jsonl", "d4",
                   "head-eagle3 (tree)", f"{weights.stat().st_size:,}"):
        assert needed in section, needed


def test_export_head_works_from_the_shipped_head_with_no_head_trained(tmp_path):
    """A fresh clone: nothing trained (an empty SPECVIZ_HEADS), the shipped float16 head exported whole."""
    import os

    env = {**os.environ, "SPECVIZ_HEADS": str(tmp_path / "no-heads"), "HF_HUB_OFFLINE": "1"}
    env.pop("SPECVIZ_SHIPPED", None)
    for format, names in (("speculators", {"config.json", "model.safetensors"}),
                          ("eagle3", {"config.json", "model.safetensors"})):
        out = tmp_path / format
        done = subprocess.run([sys.executable, "-m", "specviz", "export-head", "--format", format, "--out", str(out)],
                              capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert {p.name for p in out.iterdir()} == names
        from safetensors import safe_open

        with safe_open(str(out / "model.safetensors"), "pt") as f:
            assert "lm_head.weight" in set(f.keys())


def test_trained_files_writes_the_eagle3_cards_section_and_keeps_it(layered_target, trained, tmp_path, monkeypatch):
    """`trained-files --eagle3-head` adds its section to CARD.md (or replaces it), leaving the rest as it was; the
    section says the command, the machine, each phase's seconds and the acceptance by depth."""
    from specviz.benches import draft_quality
    from specviz.deploy import trained_files

    measured = {EAGLE3_SPEC: {"ms_per_level": 1.0, "mean_accepted": 0.5, "accepted_to_depth": [0.4, 0.1]},
                f"{EAGLE3_SPEC} (tree)": {"ms_per_level": 1.2, "mean_accepted": 0.7, "accepted_to_depth": [0.5, 0.2]}}
    monkeypatch.setattr(draft_quality, "measure_draft_quality", lambda *args: measured)
    (tmp_path / trained_files.CARD).write_text("# The default model's trained files\n\nthe head's own part\n")
    files = trained_files.write_eagle3(layered_target, Path(trained.path), tmp_path)
    first = files.card.read_text()
    assert first.startswith("# The default model's trained files\n\nthe head's own part\n\n## The EAGLE-3 head")
    section = first[first.index(trained_files.EAGLE3_SECTION):]
    record = json.loads((Path(trained.path) / "config.json").read_text())
    command = section.split("Made by `")[1].split("`")[0]   # TINY_CONFIG's options, and what only Python sets
    assert command.startswith("python -m specviz train-head --shape eagle3 --epochs 1 --draft-vocab 384 "
                              "--intermediate 64") and "--unroll" not in command   # 3: the shape's default
    assert "with TrainConfig(" in command and "questions=12" in command
    assert f"MLP width {record['intermediate_size']}" in section
    assert "| head-eagle3 (tree) | 0.70 | 0.500 | 0.200 |" in section
    assert f"{files.weights_bytes:,}" in section and "text " in section and "training " in section
    trained_files.write_eagle3(layered_target, Path(trained.path), tmp_path)   # again: one section, replaced
    assert files.card.read_text().count(trained_files.EAGLE3_SECTION) == 1
    assert trained_files._eagle3_section("# card\n\nhead\n") == ""
    assert trained_files._eagle3_section(first).startswith("\n## The EAGLE-3 head")
