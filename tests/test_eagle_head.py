"""Published EAGLE heads as drafters (runtime.eagle_files, runtime.eagle_head): heads written in the official
EAGLE-1/2 and EAGLE-3 layouts (random weights, SafeAILab/EAGLE's key names and config fields) for a small random
target load, draft trees every method that takes a model drafter verifies losslessly, and every mismatch is
refused with a sentence. Offline: nothing is fetched."""

import json

import pytest
import torch

from specviz.engine.session import Session
from specviz.errors import SpecvizError
from specviz.runtime.block_forward import masked_forward
from specviz.runtime.draft_head import MissingHead
from specviz.runtime.eagle_files import EagleLayout
from specviz.runtime.eagle_head import EagleHead
from specviz.runtime.feature_tap import eagle3_tap
from specviz.runtime.loading import load_model
from specviz.runtime.draft_model_spec import resolve_draft

PROMPTS = [[{"role": "user", "content": "Name three colours and say why you like them."}],
           [{"role": "user", "content": "def add(a, b):\n    return a + b\n\nRename add to plus."}]]


@pytest.fixture(scope="module")
def target(layered_target):
    """A random eight-layer Llama with the default model's tokenizer (EAGLE-3 fuses layers 2, 4 and 5)."""
    return layered_target


def _config(target, **fields) -> dict:
    config = target.model.config
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": config.hidden_size, "intermediate_size": 48, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 1, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float16",
            "vocab_size": target.vocab_size, **fields}


def _layer(prefix: str, hidden: int, attention_in: int, intermediate: int = 48) -> dict:
    q, kv = 4 * (hidden // 4), 2 * (hidden // 4)
    shapes = {"self_attn.q_proj": (q, attention_in), "self_attn.k_proj": (kv, attention_in),
              "self_attn.v_proj": (kv, attention_in), "self_attn.o_proj": (hidden, q),
              "mlp.gate_proj": (intermediate, hidden), "mlp.up_proj": (intermediate, hidden),
              "mlp.down_proj": (hidden, intermediate)}
    weights = {f"{prefix}{k}.weight": torch.randn(shape) * 0.2 for k, shape in shapes.items()}
    weights[f"{prefix}post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden)
    return weights


def write_eagle1(folder, target, hidden: int | None = None, bias: bool = True, **config_fields):
    """EAGLE-1/2 (cnets1.py): fc over [embedding; feature] with its bias, layers.0.* without an input norm, no
    norm, no head of its own; config.json beside pytorch_model.bin."""
    torch.manual_seed(2)
    folder.mkdir(parents=True, exist_ok=True)
    hidden = hidden or target.model.config.hidden_size
    weights = {"fc.weight": torch.randn(hidden, 2 * hidden) * 0.2, **_layer("layers.0.", hidden, hidden)}
    if bias:
        weights["fc.bias"] = torch.randn(hidden) * 0.1
    torch.save(weights, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(_config(target, hidden_size=hidden, bias=bias, **config_fields)))
    return folder


def write_eagle3(folder, target, draft_vocab: int = 512, fused_layers: int = 3):
    """EAGLE-3 (cnets.py): fc over three fused features, midlayer.* with hidden_norm and input_layernorm and an
    attention over 2 x hidden, its own norm and lm_head over draft_vocab_size tokens, d2t and t2d, the target's
    embeddings kept as embed_tokens.weight; config.json beside model.safetensors."""
    from safetensors.torch import save_file

    torch.manual_seed(3)
    folder.mkdir(parents=True, exist_ok=True)
    hidden, vocab = target.model.config.hidden_size, target.vocab_size
    chosen = sorted(set(torch.randperm(vocab)[:draft_vocab - len(target.eos_ids)].tolist()) | set(target.eos_ids))
    draft_ids = torch.tensor(chosen[:draft_vocab])
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[draft_ids] = True
    weights = {"fc.weight": torch.randn(hidden, fused_layers * hidden) * 0.2,
               **_layer("midlayer.", hidden, 2 * hidden),
               "midlayer.hidden_norm.weight": torch.ones(hidden), "midlayer.input_layernorm.weight": torch.ones(hidden),
               "norm.weight": torch.ones(hidden), "lm_head.weight": torch.randn(draft_vocab, hidden),
               "d2t": draft_ids - torch.arange(draft_vocab), "t2d": t2d,
               "embed_tokens.weight": target.model.get_input_embeddings().weight.detach().clone()}
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    config = _config(target, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=draft_vocab)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def heads(target, tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle-heads")
    return {"eagle1": write_eagle1(root / "eagle1", target), "eagle3": write_eagle3(root / "eagle3", target)}


def test_the_tap_of_three_layers_is_what_enters_them(target):
    """The lean decoder's tap (runtime.feature_tap) equals transformers' hidden_states at those indices."""
    tokens = target.tokenizer("The cat sat on the mat and looked at the dog.").input_ids
    n = len(tokens)
    tap = eagle3_tap(target.model.config.num_hidden_layers)
    assert tap.layers == (2, 4, 5)
    _, mine = masked_forward(target, target.new_cache(), tokens, list(range(n)),
                             torch.ones((n, n), dtype=torch.bool).tril(), features=tap)
    with torch.no_grad():
        theirs = target.model(torch.tensor([tokens]), output_hidden_states=True).hidden_states
    assert mine.shape == (n, 3 * 32)
    assert torch.allclose(mine, torch.cat([theirs[i][0] for i in tap.layers], -1), atol=1e-5)


@pytest.mark.parametrize("layout", ["eagle1", "eagle3"])
def test_a_head_forward_in_pieces_equals_one_forward(target, heads, layout):
    """The head's cache: positions fed in two calls give the rows one call gives."""
    head = resolve_draft(target, f"eagle:{heads[layout]}", lambda name: None)
    n, width = 9, head.feature_width
    torch.manual_seed(4)
    features, tokens = torch.randn(n, width), torch.randint(0, 1000, (n,)).tolist()
    whole = head.forward(features, tokens, list(range(1, n + 1)), torch.ones(n, n, dtype=torch.bool).tril(),
                         head.new_cache())
    cache = head.new_cache()
    first = head.forward(features[:5], tokens[:5], list(range(1, 6)), torch.ones(5, 5, dtype=torch.bool).tril(), cache)
    rest = head.forward(features[5:], tokens[5:], list(range(6, n + 1)),
                        torch.ones(4, n, dtype=torch.bool).tril(5), cache)
    for part, joined in zip(whole, (torch.cat([first[0], rest[0]]), torch.cat([first[1], rest[1]]))):
        assert torch.allclose(part, joined, atol=1e-5)


@pytest.mark.parametrize("layout,kind,tap", [("eagle1", EagleLayout.EAGLE1, ()), ("eagle3", EagleLayout.EAGLE3, (2, 4, 5))])
def test_official_layouts_load_and_every_method_with_a_model_drafter_is_lossless(target, heads, layout, kind, tap):
    head = resolve_draft(target, f"eagle:{heads[layout]}", lambda name: None)
    assert isinstance(head, EagleHead) and head.layout is kind and head.feature_tap.layers == tap
    assert len(head.draft_ids_list) == (target.vocab_size if kind is EagleLayout.EAGLE1 else 512)
    for prompt in PROMPTS:
        reference = Session(target, "ar").start(prompt)
        reference.run(24)
        for method, params in (("unified", {"model_stage": "on"}), ("reader", {}), ("respec", {"fallback": "model"})):
            session = Session(target, method, params, budget=12, draft=head).start(prompt)
            session.run(24)
            assert session.output_ids == reference.output_ids, (layout, method)
            assert sum(r.allocation.get("model", 0) for r in session.records) > 0, (layout, method)


def test_a_static_tree_drafts_with_an_eagle_head(target, heads):
    """The static tree of rank paths (issue 47's check) runs with a published head as with the trained one."""
    from specviz.studies.static_check import check_tree
    from specviz.studies.suite import SuiteItem
    from specviz.tree.static_tree import StaticTree

    head = resolve_draft(target, f"eagle:{heads['eagle3']}", lambda name: None)
    tree = StaticTree([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)], [0.5, 0.2, 0.3, 0.1, 0.2])
    suite = [SuiteItem.of(PROMPTS[0], id="p", category="chat", max_new_tokens=16)]
    checked = check_tree(target, head, tree, suite, 16)
    assert checked.lossless and checked.steps > 0
    from specviz.studies.rank_acceptance import measure_ranks

    measured = measure_ranks(target, head, "eagle-3", suite, depth=2, max_rank=8, max_new_tokens=16)
    assert measured.acceptance.positions > 0  # acceptance by rank path, measured along ar's output
    # what a serving engine sees of each head: its EAGLE version and the folder it would load
    from specviz.studies.static_study import drafter_for_engines

    for layout, kind in (("eagle3", "eagle3"), ("eagle1", "eagle")):
        spec = f"eagle:{heads[layout]}"
        drafter = drafter_for_engines(target, resolve_draft(target, spec, lambda name: None), spec)
        assert (drafter.kind, drafter.location) == (kind, str(heads[layout]))
    assert drafter_for_engines(target, target, "self").kind == "self"


def _refusal(target, location) -> str:
    draft = resolve_draft(target, f"eagle:{location}", lambda name: None)
    assert isinstance(draft, MissingHead)
    return draft.reason


def test_every_mismatch_is_refused_with_a_sentence_and_the_method_drafts_without_it(target, tiny_models, tmp_path,
                                                                                      monkeypatch):
    assert "is 64 wide; the target's features are 32 wide" in _refusal(target, write_eagle1(tmp_path / "w", target, 64))
    assert "vocabulary of 100 tokens" in _refusal(target, write_eagle1(tmp_path / "v", target, vocab_size=100))
    assert "fuses 2 layers of this target's width, not 3" in _refusal(
        target, write_eagle3(tmp_path / "f", target, fused_layers=2))
    tiny = load_model(tiny_models["same"])  # two layers: EAGLE-3 needs three distinct ones
    assert "too few for three distinct ones" in _refusal(tiny, write_eagle3(tmp_path / "t", tiny))
    damaged = write_eagle1(tmp_path / "d", target)
    (damaged / "pytorch_model.bin").write_bytes((damaged / "pytorch_model.bin").read_bytes()[:300])
    assert "damaged or unreadable" in _refusal(target, damaged)
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "config.json").write_text("{}")
    torch.save({"encoder.weight": torch.zeros(2)}, tmp_path / "n" / "pytorch_model.bin")
    assert "is not an EAGLE head" in _refusal(target, tmp_path / "n")
    assert "No config.json" in _refusal(target, tmp_path)
    assert "No EAGLE head folder" in _refusal(target, tmp_path / "absent")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "could not be found locally or fetched" in _refusal(target, "nobody-here/no-such-eagle-head")
    # the method drafts without it and says why (the copy-logit tree in the head's place)
    missing = resolve_draft(target, f"eagle:{tmp_path / 'absent'}", lambda name: None)
    session = Session(target, "unified", {"model_stage": "on"}, budget=8, draft=missing).start(PROMPTS[0])
    session.run(6)
    reference = Session(target, "ar").start(PROMPTS[0])
    reference.run(6)
    assert session.output_ids == reference.output_ids
    assert any("No EAGLE head folder" in note for note in session.method.notes)


def test_public_mode_drafts_only_with_an_allow_listed_head(monkeypatch):
    from specviz.lab.public_policy import Policy

    monkeypatch.delenv("SPECVIZ_ALLOWED_EAGLE_HEADS", raising=False)
    with pytest.raises(SpecvizError, match="drafts only with"):
        Policy.for_public().check_draft("eagle:/etc")
    monkeypatch.setenv("SPECVIZ_ALLOWED_EAGLE_HEADS", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    policy = Policy.for_public()
    assert policy.check_draft("eagle:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B") == "eagle:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    with pytest.raises(SpecvizError, match="or the EAGLE head eagle:yuhuili"):
        policy.check_draft("eagle:someone/else")
