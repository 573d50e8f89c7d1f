"""A method owns its pipeline: which drafters it builds, the stages they draft in (a later stage sees
the tree the earlier ones built), its acceptance rule, and whether it is lossless for given parameters
and temperature. The Session runs any Method through this interface and knows none of them by name."""

from __future__ import annotations

from typing import ClassVar

import torch

from specviz.accept.greedy import greedy_accept
from specviz.accept.position_noise import PositionNoise
from specviz.accept.sampling import SEEDED, STANDARD, SamplingSettings, coupled_accept, sampling_accept
from specviz.accept.verification import Verification
from specviz.params import Param, resolve
from specviz.records.notes import DrafterNote
from specviz.records.paper import PaperSettings
from specviz.records.plan import SourceShare, SourceSplit
from specviz.runtime.feature_tap import FINAL, FeatureTap
from specviz.runtime.prompts import PromptText
from specviz.runtime.verify_output import DeviceSummary
from specviz.tree.draft_tree import DraftTree
from specviz.drafters.base import Drafter, StepOutcome



class Method:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params: ClassVar[list[Param]] = []
    uses_draft_model: ClassVar[bool] = False   # whether the Session's draft model (or self-draft) is used
    paper: ClassVar[PaperSettings | None] = None  # the paper's configuration and our departures (None: ours alone)
    # parameter values under which every tree depends on the session's own state alone (no measured choice, no
    # memory shared by the process): what a test comparing two processes' trees runs
    state_only: ClassVar[dict] = {}
    # a retrieval method whose source `unified` can merge too (switch `with_<name>`; see Unified.merge): its
    # drafters come from sources(), and its build is those drafters alone
    mergeable: ClassVar[bool] = False

    # ---- parameters and promises (no model needed) ---------------------------------------------------
    @classmethod
    def check(cls, values: dict) -> None:
        """Cross-parameter checks; raise SpecvizError with a message for the user."""

    @classmethod
    def resolve_params(cls, overrides: dict | None) -> dict:
        values = resolve(cls.params, overrides, cls.name)
        cls.check(values)
        return values

    @classmethod
    def check_sampling(cls, params: dict, sampling: SamplingSettings) -> None:
        """Refuse parameter values that mean nothing at these sampling settings (SpecvizError)."""

    @classmethod
    def lossless(cls, params: dict, temperature: float) -> bool:
        """Whether the output follows the target exactly (greedy: identical tokens; sampling: the same
        distribution) with these parameters at this temperature."""
        return True

    # ---- one generation --------------------------------------------------------------------------------
    def __init__(self, lm, params: dict, draft=None, sampling: SamplingSettings = SamplingSettings(),
                 generator: torch.Generator | None = None, prompt: "PromptText | None" = None):
        """lm: the target; draft: the draft model a model source uses (None: the target's own weights);
        sampling and generator: the session's (a drafter that samples draws from the same generator, so a
        seeded run is reproducible); prompt: what the user wrote, for a drafter that builds its own
        context from it (None when the session started from token ids)."""
        self.lm, self.param_values = lm, params  # the resolved value of each of this method's parameters
        self.sampling, self.generator, self.prompt = sampling, generator, prompt
        self.noise = PositionNoise(sampling.seed)  # the seed's draw at every position (accept.position_noise)
        self.stages: list[Drafter] = self.build(lm, params, draft)

    def build(self, lm, p: dict, draft) -> list[Drafter]:
        """The drafters, in the order they draft (each stage takes what budget the earlier ones left)."""
        return self.sources(lm, p) if self.mergeable else []

    @classmethod
    def sources(cls, lm, p: dict) -> list[Drafter]:
        """A mergeable method's drafters for parameter values p (p may hold other methods' parameters too)."""
        return []

    @property
    def needs_features(self) -> bool:
        """Whether a stage drafts from the target's features (the session then computes them every forward)."""
        return any(drafter.needs_features for drafter in self.stages)

    @property
    def feature_tap(self) -> FeatureTap:
        """The hidden states the stages that need features read (one draft model per method: one tap)."""
        taps = {drafter.feature_tap for drafter in self.stages if drafter.needs_features}
        if len(taps) > 1:
            raise ValueError(f"stages read different features: {sorted(taps, key=repr)}")
        return taps.pop() if taps else FINAL

    def prefill_chunk(self, context: list[int], start: int, logits: torch.Tensor,
                      features: torch.Tensor | None = None) -> None:
        for drafter in self.stages:
            drafter.prefill_chunk(context, start, logits, features)

    def refill(self, context: list[int], start: int, features: torch.Tensor) -> None:
        """The target's features of context[start:] again, after the session rebuilt a cache it carried without."""
        for drafter in self.stages:
            drafter.refill(context, start, features)

    def draft(self, context: list[int], budget: int) -> tuple[DraftTree, SourceSplit]:
        """Stages in order grow one tree (a node two stages propose costs once); also returns the split:
        per source, the nodes it was offered and proposed, and how many of them were already in the tree."""
        tree = DraftTree(context[-1])
        split: SourceSplit = {}
        for drafter in self.stages:
            left = budget - tree.num_drafted
            if left <= 0:
                split[drafter.source] = SourceShare(offered=0, proposed=0, shared=0)
                continue
            before = tree.num_drafted
            tree, proposed = drafter.extend(context, tree, left)
            split[drafter.source] = SourceShare(offered=left, proposed=proposed,
                                                shared=proposed - (tree.num_drafted - before))
        return tree, split

    @property
    def acceptance(self) -> str:
        """The sampled-verification rule this method's parameters ask for (accept.sampling: seeded or standard)."""
        return self.param_values.get("acceptance", SEEDED)

    @property
    def verifies_by_seed(self) -> bool:
        """Whether every token this run emits is the seed's draw (greedy, or the seeded rule): then any cut
        of a tree is safe, and the output is ar's token for token. False where the session's coins decide."""
        return self.sampling.greedy or self.acceptance == SEEDED

    def accept(self, tree: DraftTree, logits: torch.Tensor, sampling: SamplingSettings,
               generator: torch.Generator, root_position: int, summary: DeviceSummary | None = None) -> Verification:
        """Strict greedy at temperature 0; else the seeded rule (the seed's draw at each position: the same
        tokens as plain decoding with that seed) or the standard one (speculative sampling with the
        session's coins), both lossless. root_position: the root's index in the context; summary: the logits'
        top-k as the device made them (runtime.verify_output), where it did."""
        if sampling.greedy:
            return greedy_accept(tree, logits, summary=summary)
        if self.acceptance == STANDARD:
            return sampling_accept(tree, logits, sampling, generator, summary=summary)
        return coupled_accept(tree, logits, sampling, self.noise, root_position, summary)

    def observe(self, outcome: StepOutcome) -> None:
        for drafter in self.stages:
            drafter.observe(outcome)

    def step_notes(self) -> tuple[DrafterNote, ...]:
        """Each stage's note on the step just observed, in stage order (stages with nothing to say left out)."""
        notes = (drafter.step_note() for drafter in self.stages)
        return tuple(note for note in notes if note is not None)

    @property
    def warnings(self) -> list[str]:
        """What the user should know about this generation's set-up (a branch that is off, and why)."""
        return []

    def finish(self, output_ids: list[int]) -> None:
        """A generation ended (EOS, context, or the caller's token limit): each stage hears of it."""
        for drafter in self.stages:
            drafter.finish(output_ids)

    def checkpoint(self) -> list:
        return [drafter.checkpoint() for drafter in self.stages]

    def rollback(self, saved: list) -> None:
        for drafter, state in zip(self.stages, saved):
            drafter.rollback(state)

