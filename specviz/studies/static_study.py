"""One study of a drafter's static trees: acceptance by rank path measured on some prompts
(studies.rank_acceptance), the best tree of every supported size N (tree.static_tree), its expected accepted
tokens and expected speedup on a deployment's cost curve (this machine's, or one of engine.deployment_cost's), and
the N that maximises it. What the CLI's `static-tree` prints and the app's static-tree tab draws."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from specviz.engine import costmodel
from specviz.engine.deployment_cost import DeploymentCost, of_this_machine
from specviz.studies.progress_events import final_result
from specviz.studies.rank_acceptance import measure_ranks
from specviz.studies.suite import SuiteItem
from specviz.errors import SpecvizError
from specviz.engine_configs import ENGINES
from specviz.engine_configs.advice import Drafter, EngineAdvice
from specviz.runtime.loaded_model import LoadedModel
from specviz.tree.static_tree import MIN_COUNT, RankAcceptance, StaticTree, best_tree, expected_curve, expected_speedups


@dataclass(frozen=True)
class StaticTreeStudy:
    drafter: str                     # the drafter as the user named it
    acceptance: RankAcceptance
    level_ms: float                  # one drafter level's forward (median), measured here
    prompts: int
    expected_accepted: list[float]   # per N (index N - 1): the best tree's expected accepted draft tokens a step
    expected_speedup: list[float]    # per N: tokens a step over the step's cost in `ar` steps, on `deployment`
    depths: list[int]                # per N: the best tree's depth
    engine_drafter: Drafter          # what the drafter is to a serving engine (engine_configs.advice)
    engines: dict[str, EngineAdvice]  # each serving engine's advice for it (engine_configs.ENGINES), on `deployment`
    deployment: DeploymentCost       # whose verify cost every speedup is priced on (engine.deployment_cost)
    here: DeploymentCost             # this machine's curve, where the drafter's level was measured
    greedy: tuple = ()               # (prompt ids, the target's greedy continuation) per prompt measured

    def priced(self, deployment: DeploymentCost) -> "StaticTreeStudy":
        """The same measurements priced on another deployment's cost curve: its speedups, its best N and every
        engine's knobs chosen there (nothing is measured again)."""
        level = deployment.level_ms(self.level_ms, self.here)
        speedups = expected_speedups(self.expected_accepted, deployment.cost_ms, level, self.depths)
        engines = advise_engines(self.engine_drafter, self.acceptance, deployment, level, self.here, self.greedy)
        return replace(self, expected_speedup=speedups, engines=engines, deployment=deployment)

    @property
    def supported(self) -> int:
        """The largest N the measurements support."""
        return len(self.expected_accepted)

    @property
    def best_tokens(self) -> int:
        return max(range(self.supported), key=lambda i: self.expected_speedup[i]) + 1

    def tree(self, tokens: int) -> StaticTree:
        return best_tree(self.acceptance, tokens)

    def engine_advice(self, engine: str) -> EngineAdvice:
        """An engine's knobs for this drafter under the engine's own drafting rule (engine_configs.ENGINES)."""
        if engine not in self.engines:
            raise SpecvizError(f"engine must be one of {', '.join(self.engines)}, got {engine!r}.")
        return self.engines[engine]


def advise_engines(drafter: Drafter, acceptance: RankAcceptance, deployment: DeploymentCost, level_ms: float,
                   here: DeploymentCost | None = None, greedy: tuple = ()) -> dict[str, EngineAdvice]:
    """Every engine's advice priced on the deployment's curve (level_ms: a drafter level there; greedy: the prompts'
    greedy continuations, which llama.cpp's n-gram rules draft along), each naming that curve, and saying so where
    it predicts a step slower than decoding without a drafter."""
    engines = {}
    whose = deployment.label()
    level_note = deployment.level_note() if here is None or deployment != here else None
    for name, module in ENGINES.items():
        if getattr(module, "NEEDS_GREEDY", False):
            advice = module.advise(drafter, acceptance, deployment.cost_ms, level_ms, greedy=greedy)
        else:
            advice = module.advise(drafter, acceptance, deployment.cost_ms, level_ms)
        if not advice.refused:
            notes = [level_note] if level_note else []
            if advice.predicted_speedup < 1:
                notes.append(f"predicted {advice.predicted_speedup:.2f}x on {whose}'s cost curve: slower than decoding "
                             "without a drafter there (another deployment's cost curve, or a better drafter, may turn "
                             "it)")
            advice = replace(advice, notes=(*advice.notes, *notes), priced_on=whose)
        engines[name] = advice
    return engines


@dataclass(frozen=True)
class StudyProgress:
    """A study's progress, after each measured prompt (what a model call sends back before the study)."""
    done: int                        # prompts measured (1..total)
    total: int                       # prompts in all
    label: str                       # the prompt just measured


def last_study(events: Iterable[StudyProgress | StaticTreeStudy],
               progress: Callable[[StudyProgress], None] | None = None) -> StaticTreeStudy:
    """The study that ends a model call's events, handing each progress event to progress on the way.
    SpecvizError when the events end without one."""
    return final_result(events, StudyProgress, StaticTreeStudy, "static-tree study", progress)


def study_static_trees(lm: LoadedModel, drafter, label: str, suite: list[SuiteItem], depth: int, max_rank: int,
                       max_new_tokens: int, progress: Callable[[int, int, str], None] | None = None,
                       deployment: DeploymentCost | None = None) -> StaticTreeStudy:
    """drafter: as measure_ranks takes it (a head, or a LoadedModel: lm itself for `self`). deployment: whose cost
    curve prices it (None: this machine's). SpecvizError when no path was followed often enough to say anything."""
    measured = measure_ranks(lm, drafter, label, suite, depth, max_rank, max_new_tokens, progress)
    acceptance = measured.acceptance
    curve = expected_curve(acceptance)
    if not curve:
        raise SpecvizError(f"No rank path of {label} was followed {MIN_COUNT} times in {acceptance.positions} "
                           "positions: measure on more prompts or tokens.")
    supported = acceptance.supported()
    depths, deepest = [], 0
    for path in supported:
        deepest = max(deepest, len(path))
        depths.append(deepest)
    here = of_this_machine(costmodel.load_or_calibrate(lm), measured.level_ms)
    speedups = expected_speedups(curve, here.cost_ms, measured.level_ms, depths)
    engine_drafter = drafter_for_engines(lm, drafter, label)
    study = StaticTreeStudy(label, acceptance, measured.level_ms, measured.prompts, curve, speedups, depths,
                            engine_drafter, advise_engines(engine_drafter, acceptance, here, measured.level_ms, here,
                                                           measured.greedy),
                            here, here, measured.greedy)
    return study.priced(deployment) if deployment is not None else study


def kind_of_spec(spec: str) -> str | None:
    """What a drafter spec names where the text alone says it: the target itself, or its first layers."""
    from specviz.runtime.layer_skip import parse_self_skip
    from specviz.runtime.draft_model_spec import SELF_DRAFT

    spec = spec.strip()
    return "self" if spec == SELF_DRAFT else "self-skip" if parse_self_skip(spec) is not None else None


def refused_before_loading(spec: str, engine: str) -> str | None:
    """Why `engine` cannot take the drafter a spec names, where the spec alone says what it is, so a command refuses
    before measuring anything; None otherwise."""
    kind = kind_of_spec(spec)
    return ENGINES[engine].refusal(Drafter(kind, spec.strip(), None)) if kind else None


def drafter_for_engines(lm: LoadedModel, drafter, label: str) -> Drafter:
    """What the drafter a study measured is to a serving engine, and where an engine would load it from."""
    from specviz.runtime.draft_head import DraftHead
    from specviz.runtime.eagle_files import lm_head_from_target, parse_eagle_spec
    from specviz.runtime.eagle_head import EagleHead
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC, eagle3_location, shown_path

    if isinstance(drafter, DraftHead):
        return Drafter("specviz-head", label, None)
    if isinstance(drafter, EagleHead):
        kind = "eagle3" if len(drafter.feature_tap.layers) == 3 else "eagle"
        if label.strip() == EAGLE3_SPEC:   # trained here: its cache folder is in EAGLE-3's layout, which they load;
            folder = eagle3_location(lm)   # the shipped one lacks its lm_head: none loads it before export-head
            return Drafter(kind, label, None if lm_head_from_target(folder) else shown_path(folder))
        return Drafter(kind, label, parse_eagle_spec(label))
    if drafter is lm:
        return Drafter("self", label, None)
    if kind_of_spec(label) == "self-skip":
        return Drafter("self-skip", label, None)
    return Drafter("draft-model", label, label)
