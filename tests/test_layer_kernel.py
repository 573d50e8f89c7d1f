"""The lean forward's native elementwise work (runtime/native/layer_kernel.cc): torch's numbers, in the layouts the
forward hands it, and torch's ops wherever it cannot run."""

import pytest
import torch
import torch.nn.functional as F
from conftest import native_library_or_skip, tree_logits_native_and_not

from specviz.runtime.native import layer_kernel


@pytest.fixture
def kernel():
    return native_library_or_skip(layer_kernel, "native layer kernel")


@pytest.mark.parametrize("rows", [1, 16, 70])
def test_rmsnorm_is_torchs(kernel, rows):
    generator = torch.Generator().manual_seed(rows)
    h, weight = torch.randn(1, rows, 576, generator=generator) * 3, torch.randn(576, generator=generator)
    assert torch.allclose(layer_kernel.rmsnorm(kernel, h, weight, 1e-5), layer_kernel.torch_rmsnorm(h, weight, 1e-5),
                          atol=1e-5, rtol=1e-5)


def test_rotary_rotates_the_q_and_k_heads_of_the_fused_output_in_place(kernel):
    """Rows lie apart (each fused row holds v after q and k); the v part is left alone."""
    generator = torch.Generator().manual_seed(1)
    n, heads, kv_heads, d = 7, 9, 3, 64
    fused = torch.randn(1, n, (heads + 2 * kv_heads) * d, generator=generator)
    angles = torch.randn(1, n, 1, d // 2, generator=generator) * 5
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    original = fused.clone()
    qk = fused[..., :(heads + kv_heads) * d].view(1, n, heads + kv_heads, d)
    wanted = layer_kernel.torch_rotary(qk.clone(), cos, sin)
    got = layer_kernel.rotary(kernel, qk, heads + kv_heads, cos, sin)
    assert got.data_ptr() == fused.data_ptr()
    assert torch.allclose(got, wanted, atol=1e-5, rtol=1e-5)
    assert torch.equal(fused[..., (heads + kv_heads) * d:], original[..., (heads + kv_heads) * d:])


@pytest.mark.parametrize("n", [16 * 1536, 64 * 1536])  # the second runs on several threads
def test_gated_activation_is_torchs_over_the_whole_range(kernel, n):
    generator = torch.Generator().manual_seed(n)
    gate = torch.cat([torch.linspace(-90, 90, 1024), torch.randn(n - 1024, generator=generator) * 4]).view(1, -1, 1536)
    up = torch.randn(gate.shape, generator=generator)
    wanted = F.silu(gate) * up
    assert torch.allclose(layer_kernel.silu_mul(kernel, gate, up), wanted, atol=1e-5, rtol=1e-5)


def test_where_it_cannot_run_torchs_ops_do():
    assert layer_kernel.usable(torch.bfloat16, torch.device("cpu"), 576, 64) is None
    assert layer_kernel.usable(torch.float32, torch.device("cpu"), 576, 48) is None
    assert layer_kernel.usable(torch.float32, torch.device("meta"), 576, 64) is None


def test_the_lean_forward_gives_the_same_logits_with_or_without_it(lm, kernel):
    on, off = tree_logits_native_and_not(lm, "native_glue", "Norms, rotary and the gate in one call each")
    assert torch.allclose(on, off, atol=2e-4, rtol=1e-4)
    assert torch.equal(on.argmax(-1), off.argmax(-1))
