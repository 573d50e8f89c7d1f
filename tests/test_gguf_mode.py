"""The gguf mode: the linear layers read the default model's GGUF blocks as the file stores them (Q4_1 layers, a Q8_0
embedding that is also the head), the kernel equals its scalar definition bitwise on every path this machine can
build (VNNI emulated where it has none), a tree's root row is the one-token step's, every method emits the mode's
own ar tokens, and a model without a GGUF falls back to fp32 with a note."""

from pathlib import Path

import pytest
import torch

from specviz.engine.session import Session
from specviz.studies.suite import load_suite
from specviz.engine.tree_forward import tree_forward
from specviz.runtime import fast_linear, gguf_blocks, modes
from specviz.runtime.block_forward import causal_forward
from specviz.runtime.native import build, quant_linear_kernel
from specviz.runtime.shared_resources import shared_model
from specviz.tree.draft_tree import DraftTree

SUITE = {i.id: i for i in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl")}
TOKENS = 48


@pytest.fixture(scope="module")
def gguf_lm(lm):
    if quant_linear_kernel.available(torch.device("cpu")) is not None:
        pytest.skip(f"no gguf kernel here: {quant_linear_kernel.status()}")
    model = shared_model(None, "gguf")
    assert model.mode == "gguf" and model.linear == fast_linear.QUANTISED, model.notes
    return model


def test_the_mode_is_parsed_and_refuses_what_it_cannot_be():
    assert modes.canonical("GGUF") == "gguf" and modes.parse_mode("gguf").quantised
    assert modes.parse_mode("gguf").dtype == torch.float32
    assert "compile does not apply" in modes.parse_mode("gguf+compile").notes[0]
    assert modes.parse_mode("gguf+bf16").notes and not modes.parse_mode("gguf+bf16").quantised
    cpu = modes.settle(modes.parse_mode("gguf"), torch.device("cpu"), torch.float32)
    assert cpu.quantised == (quant_linear_kernel.available(torch.device("cpu")) is None)
    cuda = modes.settle(modes.parse_mode("gguf"), torch.device("cuda"), torch.bfloat16)
    assert not cuda.quantised and "CPU kernel" in cuda.notes[0]


def test_the_modules_hold_the_files_own_blocks_and_their_values_are_the_fp32_weights(gguf_lm):
    """Every linear layer's blocks, dequantised, are the fp32 mode's weights bit for bit (q and k rows in
    transformers' rotary order, the tied head the embedding's Q8_0 blocks): nothing was requantised."""
    layer = gguf_lm.model.model.layers[3]
    checked = {"q": layer.self_attn.q_proj, "k": layer.self_attn.k_proj, "down": layer.mlp.down_proj,
               "head": gguf_lm.model.lm_head}
    for name, module in checked.items():
        matrix = getattr(module, fast_linear.BLOCKS_ATTRIBUTE)
        assert matrix.kind is (gguf_blocks.Q8_0 if name == "head" else gguf_blocks.Q4_1), name
        assert torch.equal(matrix.dequantised(), module.weight), name
    linears = [m for m in gguf_lm.model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(hasattr(m, fast_linear.BLOCKS_ATTRIBUTE) for m in linears)
    total = sum(getattr(m, fast_linear.BLOCKS_ATTRIBUTE).nbytes for m in linears if m is not gguf_lm.model.lm_head)
    assert 60e6 < total < 70e6  # the file's 66 MB of Q4_1 layers (the head's 30 MB of Q8_0 besides)


def test_the_kernel_is_its_scalar_definition_on_the_models_matrices_with_and_without_vnni(gguf_lm):
    """The build's vector path, and the VNNI path (emulated where this processor has none), against the scalar
    definition bitwise on the model's fused q/k/v, down and head matrices, 1 to 9 rows, each row as it is alone."""
    lib = quant_linear_kernel.library()
    vnni = quant_linear_kernel._load(build.build(quant_linear_kernel.SOURCE, build.compiler(),
                                                 ("SPECVIZ_EMULATE_VNNI",)))
    layer = gguf_lm.decoder.layers[5]
    generator = torch.Generator().manual_seed(2)
    for weight in (layer[1], layer[8], gguf_lm.decoder.head):
        x = torch.randn(9, weight.in_features, generator=generator)
        want = quant_linear_kernel.reference(lib, x, weight)
        assert torch.equal(quant_linear_kernel.forward(lib, x, weight), want)
        assert torch.equal(quant_linear_kernel.forward(vnni, x, weight), want)
        for rows in (1, 2, 5):
            assert torch.equal(quant_linear_kernel.forward(lib, x[:rows], weight), want[:rows])


def test_a_trees_root_row_is_the_one_token_step_and_near_the_fp32_forward(gguf_lm, lm, prefix_ids):
    past = prefix_ids
    for model in (gguf_lm, lm):
        cache = model.new_cache()
        causal_forward(model, cache, past[:-1])
        one = tree_forward(model, cache, DraftTree(past[-1]), len(past) - 1)
        cache.crop(-1)
        tree = DraftTree(past[-1])
        for token in (11, 12, 13):
            tree.add_path([token, token + 1, token + 2], "logits")
        tree.add_path(past[:9], "retrieval")
        many = tree_forward(model, cache, tree, len(past) - 1)
        assert torch.equal(many[0], one[0]), model.mode
        if model is gguf_lm:
            quantised = many
        else:
            # 8-bit activations against fp32 ones: the same model within a few tenths of a logit
            assert (quantised - many).abs().max() < 1.5
            assert torch.equal(quantised[0].argmax(), many[0].argmax())
    assert gguf_lm.decoder.native_decoder() is not None, gguf_lm.forward_backend()


@pytest.fixture(scope="module")
def gguf_ar(gguf_lm) -> dict:
    """The gguf mode's greedy ar on each prompt, run once for every method's test."""
    class References(dict):
        def __missing__(self, item_id):
            session = Session(gguf_lm, "ar").start(SUITE[item_id].messages)
            session.run(TOKENS)
            self[item_id] = session.output_ids
            return self[item_id]

    return References()


@pytest.mark.parametrize("method, item_id", [("pld", "code-rename"), ("racer", "sum-lighthouse"),
                                             ("respec", "code-rename"), ("reader", "sum-lighthouse"),
                                             ("unified", "code-rename"), ("unified", "sum-lighthouse")])
def test_every_method_emits_the_gguf_modes_ar_tokens(gguf_lm, gguf_ar, method, item_id):
    session = Session(gguf_lm, method, budget=24).start(SUITE[item_id].messages)
    session.run(TOKENS)
    assert session.output_ids == gguf_ar[item_id]
    assert max(len(r.nodes) for r in session.records) > 1  # trees were verified, not only single tokens


def test_a_seed_gives_the_gguf_modes_ar_tokens_when_sampling(gguf_lm):
    from specviz.accept.sampling import SamplingSettings

    sampling = SamplingSettings.checked(0.8, 0.95, 7)
    messages = SUITE["code-rename"].messages
    reference = Session(gguf_lm, "ar", sampling=sampling).start(messages)
    reference.run(TOKENS)
    session = Session(gguf_lm, "unified", budget=24, sampling=sampling).start(messages)
    session.run(TOKENS)
    assert session.output_ids == reference.output_ids


def test_a_model_without_a_gguf_runs_fp32_and_says_why(tiny_models):
    from specviz.runtime.loading import load_model

    model = load_model(tiny_models["same"], mode="gguf")
    assert model.mode == "fp32" and model.linear != fast_linear.QUANTISED
    assert any("runs a GGUF file's own blocks" in note for note in model.notes), model.notes


def test_the_prefill_reads_the_blocks_too_its_last_row_is_the_one_token_step(gguf_lm, prefix_ids):
    """The mode's prefill runs the quantised kernel (compute-bound over a prompt, where the modules' fp32 kernel
    takes twice its time): a prompt's last row out of the prefill is bitwise the one-token step after the rest."""
    whole = gguf_lm.new_cache()
    last_row = causal_forward(gguf_lm, whole, prefix_ids)[-1]
    cache = gguf_lm.new_cache()
    causal_forward(gguf_lm, cache, prefix_ids[:-1])
    step = tree_forward(gguf_lm, cache, DraftTree(prefix_ids[-1]), len(prefix_ids) - 1)[0]
    assert torch.equal(last_row, step)
