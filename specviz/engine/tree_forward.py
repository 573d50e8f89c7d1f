"""The verify forward: a draft tree through the target in one pass with tree attention."""

from __future__ import annotations

import torch

from specviz.runtime.block_forward import masked_forward
from specviz.runtime.feature_tap import tap_of
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.static_kv import StaticKV
from specviz.runtime.verify_output import VerifyOutput
from specviz.tree.draft_tree import DraftTree


def tree_visibility(tree: DraftTree, past_len: int) -> torch.Tensor:
    """(q, past + q) bool: every node sees the whole cache and its own ancestors (tree attention)."""
    visible = torch.ones((len(tree), past_len + len(tree)), dtype=torch.bool)
    visible[:, past_len:] = torch.from_numpy(tree.ancestor_mask())
    return visible


def verify_tree(lm: LoadedModel, cache, tree: DraftTree, past_len: int, features=False) -> VerifyOutput:
    """The verify forward of every tree node, root first; the cache grows by q entries. features: the target's
    features (q, width) too, for a drafter that drafts from them (True: the final norm's; a FeatureTap: the layers it
    names). On a static cache the verifier runs it (runtime.captured_forward: mask and positions built on the device,
    a graph where captured, and the logits' top-k summarised there)."""
    if isinstance(cache, StaticKV):
        if not getattr(tap_of(features), "final", True):
            raise ValueError("a static cache's verifier returns the final norm's features only: a session whose "
                             "drafter taps other layers keeps a dynamic cache (LoadedModel.new_cache(dynamic=True))")
        return lm.verifier.forward(cache, tree.tokens, [0, *tree.parents[1:]], past_len, features)
    out = masked_forward(lm, cache, tree.tokens, [past_len + d for d in tree.depths],
                         tree_visibility(tree, past_len), features)
    return VerifyOutput(*out) if features else VerifyOutput(out)


def tree_forward(lm: LoadedModel, cache, tree: DraftTree, past_len: int, features=False):
    """verify_tree's logits (q, vocab), or (logits, features) with features."""
    out = verify_tree(lm, cache, tree, past_len, features)
    return (out.logits, out.features) if features else out.logits
