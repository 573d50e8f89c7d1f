"""The `model` source of a method, whatever the draft model is: the trained draft head (drafters.head), a
draft LM (drafters.draft_model; the target's own weights when none is given), or nothing when the head was
asked for and cannot draft (runtime.draft_head.MissingHead): the method then drafts with the copy-logit
tree where the head would have drafted, and shows why."""

from __future__ import annotations

from specviz.accept.position_noise import PositionNoise
from specviz.accept.sampling import SamplingSettings
from specviz.drafters.base import Drafter
from specviz.drafters.draft_model import DRAFT_MODEL_PARAMS, draft_model_drafter
from specviz.drafters.head import HEAD_PARAMS, head_drafter
from specviz.runtime.draft_head import MissingHead
from specviz.runtime.eagle_head import drafts_from_features

# every method that drafts with a model shows both groups: the draft LM's tree shape and the head's
MODEL_PARAMS = DRAFT_MODEL_PARAMS + HEAD_PARAMS


def model_drafter(lm, p: dict, draft, sampler: tuple[SamplingSettings, PositionNoise] | None = None
                  ) -> Drafter | None:
    """The drafter of the method's draft model for MODEL_PARAMS values p; None for a MissingHead. sampler:
    the run's sampling and the seed's noise (the head samples its first child from its q with them)."""
    if isinstance(draft, MissingHead):
        return None
    if drafts_from_features(draft):
        return head_drafter(draft, p, sampler)
    return draft_model_drafter(lm, p, draft)


def draft_note(draft) -> list[str]:
    """What a method says about its draft model: why the head is not drafting, when it is not."""
    if isinstance(draft, MissingHead):
        return [f"Draft head unavailable, the copy-logit tree drafts in its place: {draft.reason}"]
    return []


def drafter_setting(lm, draft, p: dict) -> str:
    """Key under which measured drafter speeds are shared by sessions with the same models and shapes."""
    if drafts_from_features(draft):
        shape = f"{p['head_breadth']}|{p['head_expand']}|{p['head_depth']}|{p['head_nodes']}"
    else:
        shape = f"{p['draft_breadth']}|{p['branch_levels']}|{p['draft_depth']}"
    # the target's mode too: a step's cost (and so which kind pays) differs between fp32 and the gguf mode
    return f"{lm.name}|{lm.mode}|{draft.name if draft else 'self'}|{lm.device}|{shape}|{p.get('max_breadth')}"
