"""A static-tree study for a visitor, beside the sweep: the drafter, the prompts and the depth checked against the
public policy before any model runs, the study run through the model-call router (lab.model_calls) with its
progress as typed events, each serving engine's knobs for the drafter under its own rule (engine_configs), and a
tree of N tokens as JSON and as a GraphML file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specviz.studies.static_study import StaticTreeStudy, StudyProgress
from specviz.studies.suite import SuiteItem
from specviz.errors import SpecvizError, quoted
from specviz.lab.fair_share import UNLIMITED, CallBudget
from specviz.lab.input_values import text_value, whole_number
from specviz.lab.lab_state import CallAction, ModelCall, StaticTreeRequest
from specviz.lab.prompt_scope import PAGE_PROMPT, scoped_prompts
from specviz.lab.public_policy import Policy
from specviz.lab.visitor_request import MAX_NAME_CHARS, VisitorRequest
from specviz.tree.static_tree import StaticTree
from specviz.engine_configs.advice import EngineAdvice
from specviz.tree.static_tree_export import ENGINE_FORMATS, FORMATS, export

SCOPES = (PAGE_PROMPT, "tuning suite", "held-out suite")
TEXT_FORMATS = tuple(f for f in FORMATS if f != "graphml")  # GraphML comes as a file
MAX_RANK = 16        # ranks tracked at each level: more than a 64-token tree uses on the default model
MAX_DEPTH = 8
MAX_TOKENS = 256     # new tokens per prompt where no public limit applies
MAX_SHOWN_N = 128    # the N slider's top (a tree of more is not drawn usefully)


@dataclass
class StaticTreeStudies:
    """A visitor's static-tree studies: what they may run (the policy; the suites they may measure on)."""
    policy: Policy = field(default_factory=Policy.private)
    suites: dict[str, list[SuiteItem]] = field(default_factory=dict)

    @property
    def max_tokens(self) -> int:
        return self.policy.max_sweep_tokens or MAX_TOKENS

    def plan(self, request: VisitorRequest, drafter, page_draft_model, scope, tokens, depth) -> StaticTreeRequest:
        """The checked study: the drafter named here, else the page's draft model box (whatever method the page
        shows, so the request's settings may not carry it); the page's model and run mode; the prompts of scope;
        tokens per prompt and the deepest level. SpecvizError, one sentence, for anything refused; nothing has run
        then."""
        chosen = request.settings
        named = text_value("drafter", drafter, MAX_NAME_CHARS).strip() or \
            text_value("draft model", page_draft_model or "", MAX_NAME_CHARS).strip()
        spec = self.policy.check_draft(named)
        tokens = whole_number("new tokens per prompt", tokens, 1, self.max_tokens)
        depth = whole_number("deepest level", depth, 1, MAX_DEPTH)
        prompts = scoped_prompts(scope, chosen, self.suites, self.policy.max_sweep_runs)
        return StaticTreeRequest(model=chosen.model, mode=chosen.mode, drafter=spec, prompts=tuple(prompts),
                                 depth=depth, max_rank=MAX_RANK, max_new_tokens=tokens,
                                 max_prompt_tokens=chosen.max_prompt_tokens)

    @staticmethod
    def call_of(planned: StaticTreeRequest) -> ModelCall:
        return ModelCall(CallAction.STATIC_TREE, (), static_tree=planned)

    def measure(self, planned: StaticTreeRequest, progress: Callable[[StudyProgress], None],
                budget: CallBudget = UNLIMITED) -> StaticTreeStudy:
        """One model call (lab.model_calls): progress(event) on each step of the study; the study."""
        from specviz.lab import model_calls

        return model_calls.studied(self.call_of(planned), progress, budget)

    @staticmethod
    def deployments() -> list[str]:
        """The cost curves a study can be priced on (engine.deployment_cost): this machine's, then the shipped ones."""
        from specviz.engine.deployment_cost import THIS_MACHINE, shipped

        return [THIS_MACHINE, *shipped()]

    @staticmethod
    def deployment_named(name):
        """The shipped curve of that name, or None for this machine's; SpecvizError for any other value."""
        from specviz.engine.deployment_cost import THIS_MACHINE, shipped

        name = text_value("cost of the deployment", name, MAX_NAME_CHARS).strip() or THIS_MACHINE
        if name == THIS_MACHINE:
            return None
        curves = shipped()
        if name not in curves:
            raise SpecvizError(f"The cost of the deployment must be one of {', '.join([THIS_MACHINE, *curves])}, "
                               f"got {quoted(name)}.")
        return curves[name]

    @staticmethod
    def priced(study: StaticTreeStudy, name) -> StaticTreeStudy:
        """The study on the named deployment's cost curve (this machine's: as measured)."""
        deployment = StaticTreeStudies.deployment_named(name) or study.here
        return study if deployment == study.deployment else study.priced(deployment)

    @staticmethod
    def shown_size(study: StaticTreeStudy, n) -> int:
        """N checked against what the study supports (and the slider shows)."""
        return whole_number("N", n, 1, min(study.supported, MAX_SHOWN_N))

    @staticmethod
    def exported(study: StaticTreeStudy, tree: StaticTree, fmt) -> EngineAdvice | str:
        """For an engine's format, that engine's advice for the study's drafter (its own knobs, whatever N shows);
        for json, the study's best tree of N tokens (study.tree(N)) with the study's figures."""
        if fmt not in TEXT_FORMATS:
            raise SpecvizError(f"format must be one of {', '.join(TEXT_FORMATS)}, got {quoted(fmt)}.")
        if fmt in ENGINE_FORMATS:
            return study.engine_advice(ENGINE_FORMATS[fmt])
        n = tree.size
        extra = {"drafter": study.drafter, "positions": study.acceptance.positions,
                 "expected_speedup": round(study.expected_speedup[n - 1], 3), "best_tokens_here": study.best_tokens}
        return export(tree, fmt, extra)

    @staticmethod
    def write_graphml(tree: StaticTree, folder: Path) -> Path:
        """A tree of N tokens as a GraphML file in folder; its path."""
        path = Path(folder) / f"specviz-static-tree-{tree.size}.graphml"
        path.write_text(export(tree, "graphml"))
        return path
