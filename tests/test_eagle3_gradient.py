"""EAGLE-3's training-time test keeps the gradient between its steps (training.train_eagle3.eagle3_losses): the loss
of step 1 back-propagates into what step 0 wrote, so step 0 also learns to write a feature step 1 reads well. A tiny
network on the CPU, no model: the test fails where each step's input is detached."""

import torch

from specviz.runtime.draft_head import HeadShape
from specviz.training.eagle3_network import Eagle3Network
from specviz.training.train_eagle3 import eagle3_losses
from specviz.training.train_head import Sequence

SHAPE = HeadShape(hidden=16, heads=2, kv_heads=1, head_dim=8, intermediate=24, draft_vocab=12)
VOCAB = 20


def tiny_setup(seed: int = 0):
    from transformers import LlamaConfig

    torch.manual_seed(seed)
    rotary = LlamaConfig(hidden_size=SHAPE.hidden, num_attention_heads=SHAPE.heads, head_dim=SHAPE.head_dim,
                         num_key_value_heads=SHAPE.kv_heads, max_position_embeddings=64)
    draft_ids = torch.tensor([0, 1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 18])   # sorted target ids, SHAPE.draft_vocab
    rows = torch.randn(len(draft_ids), SHAPE.hidden)
    network = Eagle3Network(SHAPE, 1e-6, rotary, rows, draft_ids)
    embed = torch.nn.Embedding(VOCAB, SHAPE.hidden)
    batch = []
    for n in (9, 7):
        batch.append(Sequence(torch.randint(0, VOCAB, (n,)), 1, torch.randn(n, SHAPE.hidden),
                              torch.randn(n, 3 * SHAPE.hidden)))
    return network, embed, batch


def test_the_second_steps_loss_reaches_what_the_first_step_wrote():
    network, embed, batch = tiny_setup()
    outputs: list[torch.Tensor] = []
    step = network.step

    def recorded(*args):   # each step's output h, as eagle3_losses feeds it to the next step
        outputs.append(step(*args))
        return outputs[-1]

    network.step = recorded
    losses, _ = eagle3_losses(network, embed, batch, unroll=3, cls_weight=0.0)
    assert len(outputs) == 3 and all(loss.requires_grad for loss in losses)
    # step 0's output h reaches step 1 only as step 1's input feature (its keys come from fc and the embeddings,
    # not from h): with that input detached the gradient would be None
    for later in (1, 2):
        grad, = torch.autograd.grad(losses[later], outputs[0], retain_graph=True, allow_unused=True)
        assert grad is not None and float(grad.abs().sum()) > 0, f"step {later}'s loss does not reach step 0's output"
    grad, = torch.autograd.grad(losses[2], outputs[1], retain_graph=True, allow_unused=True)
    assert grad is not None and float(grad.abs().sum()) > 0
    # the last step's output feeds no later step: its gradient comes from its own loss alone
    unused, = torch.autograd.grad(losses[1], outputs[2], retain_graph=True, allow_unused=True)
    assert unused is None


def test_the_gradient_through_the_steps_changes_what_the_layer_learns():
    """Step 1's loss trains the MLP also through step 0's output: its gradient on the MLP is not what it is with
    step 0's output cut off (as the detached recipe had it)."""
    network, embed, batch = tiny_setup(1)
    losses, _ = eagle3_losses(network, embed, batch, unroll=2, cls_weight=0.0)
    through = torch.autograd.grad(losses[1], network.midlayer.mlp.down_proj.weight)[0]
    step = network.step
    calls = []

    def cut(embeds, features, *rest):
        calls.append(1)
        return step(embeds, features.detach() if len(calls) > 1 else features, *rest)

    network.step = cut
    losses, _ = eagle3_losses(network, embed, batch, unroll=2, cls_weight=0.0)
    detached = torch.autograd.grad(losses[1], network.midlayer.mlp.down_proj.weight)[0]
    assert float((through - detached).abs().max()) > 1e-6 * float(through.abs().max())
