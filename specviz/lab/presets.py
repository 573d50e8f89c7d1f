"""Presets: one-click A/B configurations that each show one thing, with the sentence of what to look at."""

from __future__ import annotations

from dataclasses import dataclass, field

from specviz.lab.public_policy import Policy
from specviz.lab.visitor_request import VisitorRequest
from specviz.tree.budget import AUTO_BUDGET


@dataclass(frozen=True)
class Preset:
    name: str
    question: str          # what to look at, one sentence
    example: str           # label of an example prompt (category: suite id)
    method: str            # the page's method (side A and B override from it)
    side_a: str            # overrides, as the A/B boxes take them
    side_b: str
    temperature: float = 0.0
    max_new_tokens: int = 64
    params: dict = field(default_factory=dict)

    def request(self, examples: dict[str, str], policy: Policy = Policy.private()) -> VisitorRequest:
        """The page's settings this preset sets (its example prompt, method, temperature, token limit and
        parameters; the rest at their defaults), through the one door: a preset the policy refuses raises
        SpecvizError."""
        return VisitorRequest.of_loose({"model": "", "prompt": examples[self.example], "method": self.method,
                                        "budget": AUTO_BUDGET, "params": self.params, "temperature": self.temperature},
                                       policy, self.max_new_tokens)


PRESETS = [
    Preset("Copied code: retrieval vs logits",
           "On a prompt that copies code, which source drafts the copy? Compare mean accepted per step and the "
           "trees: retrieval proposes whole spans it has seen, the copy-logit tree guesses a few tokens ahead.",
           "code-edit: code-rename", "racer", "method=racer-retrieval", "method=racer-logits"),
    Preset("ReSpec: tau 0 vs 3",
           "tau > 0 also accepts retrieved tokens the target ranked high but not first (yellow, relaxed): "
           "what does B gain per step, and what did it change in the text (the diff below)?",
           "summarise: sum-lighthouse", "respec", "tau=0", "tau=3"),
    Preset("ReSpec: entropy threshold low vs high",
           "The trigger retrieves only when the model is uncertain: a low threshold retrieves at almost every "
           "step, a high one hardly ever. Which drafts more, and which accepts more of what it drafts?",
           "passage-qa: qa-meeting", "respec", "entropy_threshold=0.5", "entropy_threshold=3"),
    Preset("RAPID: eta 0 vs 10 at temperature 0.8",
           "eta pulls the target towards the RAG drafter that read the document: B accepts more drafts, and the "
           "cyan stars are drafts p alone would have refused (the output no longer follows the target's own "
           "distribution).", "long-context: lc-ferry-2", "rapid", "eta=0", "eta=10", temperature=0.8),
    Preset("Big fixed tree vs auto budget",
           "A 64-node tree accepts more per step, but on a CPU each verify of 64 tokens costs about three "
           "one-token steps: compare tokens/s, not only mean accepted per step.",
           "code-edit: code-rename", "racer", "budget=64", "budget=auto"),
]
BY_NAME = {preset.name: preset for preset in PRESETS}
