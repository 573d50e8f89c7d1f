"""The record every engine module returns (EngineAdvice), what a drafter is to an engine (DrafterKind), and the
arithmetic they share: a step's predicted speedup from its expected accepted tokens, the tree it verifies and the
drafter levels it runs, on a deployment's verify cost curve (engine.deployment_cost: this machine's by default)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specviz.tree.static_tree import RankAcceptance, RankPath

# what a drafter is, as the engines see it: an EAGLE-3 head, an EAGLE-1/2 head, specviz's own trained head (no
# engine reads its file), a separate draft model of the target's vocabulary, the target's own first layers, or the
# target itself
DRAFTER_KINDS = ("eagle3", "eagle", "specviz-head", "draft-model", "self-skip", "self")


@dataclass(frozen=True)
class Drafter:
    """The drafter a study measured: its kind, what the user named (`head`, `eagle:PATH`, a model id), and the
    location an engine would load it from (None where there is none: specviz's head, self-skip, self)."""
    kind: str
    spec: str
    location: str | None


@dataclass(frozen=True)
class RulesSource:
    """Where an engine's rules were read: repository, file and version (or commit) and when."""
    engine: str
    where: str


@dataclass(frozen=True)
class DraftShape:
    """What the engine drafts a step: a static tree of rank paths (a chain, Medusa's choices), or EAGLE-2's
    dynamic rule (`steps` levels, the best `topk` of each level expanded into `topk` children each, the best
    `drafts` nodes kept), so a session can draft the same and measure what is accepted (studies.static_check)."""
    paths: tuple[RankPath, ...] = ()
    steps: int = 0
    topk: int = 0
    drafts: int = 0


def chain(length: int) -> DraftShape:
    return DraftShape(paths=tuple((0,) * depth for depth in range(1, length + 1)))


@dataclass(frozen=True)
class EngineAdvice:
    """An engine's knobs for a drafter, the draft tokens a step is predicted to accept under the engine's own
    drafting rule, the speedup that predicts on this machine, the exact config text, and the engine's validation
    problems with it (empty: it passes). `refused`: why no config can be printed (then only the reason and the
    alternative are)."""
    engine: str
    knobs: tuple[tuple[str, object], ...]
    predicted_accepted: float
    predicted_speedup: float
    verified_tokens: int          # tokens the engine verifies a step (drafts + the root)
    config_text: str
    rules: RulesSource
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    refused: str | None = None
    shape: DraftShape | None = None  # what it drafts a step (None: refused)
    priced_on: str = "this machine"  # whose verify cost curve the speedup is predicted on (engine.deployment_cost)


def refused(engine: str, rules: RulesSource, why: str) -> EngineAdvice:
    return EngineAdvice(engine, (), 0.0, 0.0, 0, "", rules, refused=why)


def step_speedup(accepted: float, verified: int, levels: int, verify_ms: Callable[[int], float],
                 level_ms: float) -> float:
    """Tokens a step (the accepted drafts and the target's own) over the step's cost in one-token steps: a
    verify forward of `verified` tokens and `levels` drafter forwards."""
    return (1 + accepted) * verify_ms(1) / (verify_ms(verified) + levels * level_ms)


def chain_accepted(acceptance: RankAcceptance, length: int) -> float:
    """Expected accepted drafts of a chain of the drafter's best token at each of `length` levels: the chances of
    the rank paths (0,), (0, 0), ... (of those followed at least MIN_COUNT times)."""
    return sum(acceptance.supported_chance((0,) * depth) for depth in range(1, length + 1))


# where a config names the drafter to load and the drafter is specviz's own head, whose file no engine reads
HEAD_PLACEHOLDER = "PATH/TO/EAGLE3-HEAD"


def head_location(drafter: Drafter) -> str:
    """The path an engine loads the drafter from, or the placeholder for specviz's head."""
    return drafter.location or HEAD_PLACEHOLDER


def own_head_note(engine: str) -> str:
    return (f"specviz's trained head is in specviz's own file format, which {engine} does not read: the knobs are "
            f"this head's, and {HEAD_PLACEHOLDER} must name an EAGLE-3 head {engine} loads (the default model's "
            "ships, and `python -m specviz train-head --shape eagle3` trains one here: measure it as head-eagle3, "
            "`export-head` writes it out).")


def head_notes(drafter: Drafter, engine: str) -> list[str]:
    """What the config's drafter path is, for specviz's own heads: the note on the trained head's file, or where the
    EAGLE-3-shaped head trained here lies and how to copy it out for the engine (the shipped one: how to export it
    first)."""
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC

    if drafter.kind == "specviz-head":
        return [own_head_note(engine)]
    if drafter.spec.strip() != EAGLE3_SPEC:
        return []
    export = "speculators" if engine == "vLLM" else "eagle3"
    served = " (or `vllm serve DIR` alone: the speculators config names the target)" if engine == "vLLM" else ""
    if drafter.location is None:   # the shipped head: its lm_head is the target's rows, left out of the file
        return [f"The EAGLE-3 head specviz ships leaves out its lm_head (the target's own rows), which {engine} needs: "
                f"`python -m specviz export-head --format {export} --out DIR` writes the whole folder; name DIR as "
                f"{HEAD_PLACEHOLDER}{served}."]
    return [f"The model path is the EAGLE-3-shaped head trained here, in specviz's cache in EAGLE-3's layout, which "
            f"{engine} loads; `python -m specviz export-head --format {export} --out DIR` copies it out to serve "
            f"elsewhere{served}."]


def best_chain(acceptance: RankAcceptance, verify_ms: Callable[[int], float], level_ms: float, most: int) -> int:
    """The chain length k (1..most, at most the measured depth) of the largest predicted speedup: k drafter
    levels, k + 1 tokens verified."""
    deepest = max(1, min(acceptance.depth, most))
    return max(range(1, deepest + 1),
               key=lambda k: step_speedup(chain_accepted(acceptance, k), k + 1, k, verify_ms, level_ms))
