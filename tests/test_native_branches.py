"""Every branch of the native kernels, built on this machine for another architecture (SPECVIZ_NATIVE_ARCH):
x86-64-v3 is what an AVX2-only processor runs, x86-64 (SSE only) the generic 4-float code a NEON machine shares
the shape of. Each gives F.linear's and ATen's numbers within fp32 rounding, a row's result independent of the
rows beside it, and a tree's root row bitwise the one-token step through the whole forward."""

import platform
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from specviz.engine.tree_forward import tree_forward
from specviz.runtime.kv import new_cache
from specviz.runtime.loading import load_model
from specviz.runtime.native import (attention_kernel, build, decoder_kernel, layer_kernel, linear_kernel, logit_kernel,
                                    quant_linear_kernel)
from specviz.tree.draft_tree import DraftTree

KERNELS = (linear_kernel, attention_kernel, layer_kernel, decoder_kernel, logit_kernel, quant_linear_kernel)


def _flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def _branches() -> list[tuple[str, str]]:
    """(architecture, the linear kernel's blocking it must report) that this processor can run."""
    if platform.machine() not in ("x86_64", "AMD64") or build.compiler() is None:
        return []
    branches = [("x86-64", "generic")]
    if {"avx2", "fma"} <= _flags():
        branches.insert(0, ("x86-64-v3", "avx2-fma"))
    return branches


BRANCHES = _branches() or [pytest.param("none", "none", marks=pytest.mark.skip(
    reason="builds for other architectures are tested on x86-64 with a C++ compiler"))]


@pytest.fixture
def architecture(request, monkeypatch):
    """Every native kernel rebuilt for the architecture, then forgotten again (the next use rebuilds the default)."""
    arch = request.param
    monkeypatch.setenv("SPECVIZ_NATIVE_ARCH", arch)
    for kernel in KERNELS:
        kernel.reset()
    yield arch
    monkeypatch.delenv("SPECVIZ_NATIVE_ARCH")
    for kernel in KERNELS:
        kernel.reset()


@pytest.mark.parametrize("architecture, blocking", BRANCHES, indirect=["architecture"])
def test_the_linear_kernel_of_each_branch_is_torchs_and_row_independent(architecture, blocking):
    lib = linear_kernel.library()
    assert lib is not None, linear_kernel.status()
    assert linear_kernel.isa(lib) == blocking
    generator = torch.Generator().manual_seed(5)
    for out_features, in_features in ((960, 576), (37, 29), (576, 1536)):
        weight = torch.randn(out_features, in_features, generator=generator) * 0.05
        bias = torch.randn(out_features, generator=generator)
        grouped = linear_kernel.group(weight, lib)
        x = torch.randn(1, 21, in_features, generator=generator)
        got = linear_kernel.forward(lib, x, grouped, bias)
        assert torch.allclose(got, F.linear(x, weight, bias), atol=1e-4, rtol=1e-4)
        for rows in (1, 2, 3, 5, 8, 13, 21):
            assert torch.equal(linear_kernel.forward(lib, x[:, :rows], grouped, bias), got[:, :rows]), rows


@pytest.mark.parametrize("architecture, blocking", BRANCHES, indirect=["architecture"])
def test_every_kernel_of_each_branch_passes_its_self_check(architecture, blocking):
    """Each kernel's own check against torch (attention against ATen's, the whole decoder layer against the
    per-call references, the logit summary against topk and logsumexp, the quantised kernel against its scalar
    definition bitwise) runs when it is loaded."""
    for kernel in KERNELS:
        assert kernel.library() is not None, f"{kernel.__name__}: {kernel.status()}"
    expected = "avx2" if architecture == "x86-64-v3" else "generic"
    assert quant_linear_kernel.isa() == expected


@pytest.mark.parametrize("architecture, blocking", BRANCHES, indirect=["architecture"])
def test_a_trees_root_row_is_the_one_token_step_on_each_branch(architecture, blocking):
    """The whole lean forward, built for the branch: a tree's root logits bitwise the one-token step's, and
    the tree's logits within fp32 rounding of the same forward through stock F.linear."""
    model = load_model(None, linear="native")
    assert model.decoder.native_decoder() is not None and linear_kernel.isa() == blocking
    past = model.tokenizer("A tree's root row is the one-token step on every branch", return_tensors="pt") \
        .input_ids[0].tolist()
    cache = new_cache(model.model.config)
    with torch.inference_mode():
        model.model(input_ids=torch.tensor([past[:-1]]), past_key_values=cache, use_cache=True)
    one = tree_forward(model, cache, DraftTree(past[-1]), len(past) - 1)
    cache.crop(-1)
    tree = DraftTree(past[-1])
    for token in (11, 12, 13, 14):
        tree.add_path([token, token + 1, token + 2, token + 3], "logits")
    many = tree_forward(model, cache, tree, len(past) - 1)
    assert len(tree) == 17 and torch.equal(many[0], one[0])
    cache.crop(-len(tree))
    with model.decoder.forcing("stock"):
        stock = tree_forward(model, cache, tree, len(past) - 1)
    assert torch.allclose(stock, many, atol=2e-3, rtol=1e-4)


def test_an_architecture_name_that_is_no_name_is_refused(monkeypatch):
    monkeypatch.setenv("SPECVIZ_NATIVE_ARCH", "native; rm -rf /")
    with pytest.raises(RuntimeError, match="is not an architecture name"):
        build.flags()
    monkeypatch.setenv("SPECVIZ_NATIVE_ARCH", "x86-64-v3")
    assert "-march=x86-64-v3" in build.flags()
