"""A/B compare: two configurations on the same prompt, each a Lab, stepping together or run to the end.
A side is the page's settings with overrides written as NAME=VALUE pairs ("method=respec tau=3"). What the tab
shows of both is render.compare_view's."""

from __future__ import annotations

from dataclasses import dataclass, field

from specviz.errors import SpecvizError, quoted
from specviz.runtime.gc_pauses import request_collection
from specviz.lab.fair_share import UNLIMITED, CallBudget
from specviz.lab.lab import Lab
from specviz.lab.live_sessions import LIVE
from specviz.lab.lab_state import CallAction, ModelCall
from specviz.lab.input_values import text_value
from specviz.lab.public_policy import Policy
from specviz.lab.visitor_request import VisitorRequest

MAX_OVERRIDES_CHARS = 500


def parse_overrides(text: str) -> dict[str, str]:
    """'method=respec tau=3, temperature=0.8' -> {'method': 'respec', 'tau': '3', 'temperature': '0.8'}."""
    text = text_value("a side's overrides", text, MAX_OVERRIDES_CHARS)
    overrides = {}
    for item in text.replace(",", " ").split():
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise SpecvizError(f"{quoted(item)} is not NAME=VALUE (write e.g. method=respec tau=3).")
        if name in overrides:
            raise SpecvizError(f"{quoted(name)} is set twice.")
        overrides[name] = value
    return overrides


def side_request(base: VisitorRequest, overrides: str, policy: Policy = Policy.private()) -> VisitorRequest:
    """One side: the page's request with the side's overrides, checked as any request is."""
    return base.with_overrides(parse_overrides(overrides), policy)


@dataclass
class Compare:
    a: Lab = field(default_factory=Lab)
    b: Lab = field(default_factory=Lab)
    message: str = ""

    def choose(self, base: VisitorRequest | dict, overrides_a: str, overrides_b: str,
               policy: Policy = Policy.private()) -> None:
        """Both sides from the page's request (or Lab.choose_values' keyword arguments) with each side's overrides;
        a side whose settings are bad is named, and neither changes."""
        if not isinstance(base, VisitorRequest):
            base = VisitorRequest.of_loose(base, policy)
        sides = []
        for name, overrides in (("A", overrides_a), ("B", overrides_b)):
            try:
                sides.append(side_request(base, overrides, policy))
            except SpecvizError as error:
                raise SpecvizError(f"Side {name}: {error}") from None
        self.a.choose(sides[0])
        self.b.choose(sides[1])
        self.message = ""

    def _call(self, action: CallAction, max_new_tokens: int, budget: CallBudget = UNLIMITED):
        """One model call on both sides' states (lab.model_calls): each reply becomes the sides' states."""
        from specviz.lab import model_calls

        if self.a.wanted is None or self.b.wanted is None:
            raise SpecvizError("No prompt yet: enter a prompt (or pick an example) first.")
        call = ModelCall(action, (self.a.wanted, self.b.wanted), int(max_new_tokens))
        LIVE.touch(self.a, self.b)
        generations, counted = (self.a.generation, self.b.generation), False
        replies = model_calls.call(call, [self.a.state, self.b.state], budget)
        try:
            while True:
                with self.a.stepping, self.b.stepping:  # held while the call works, not while a reply is shown
                    reply = next(replies, None)
                if reply is None or (self.a.generation, self.b.generation) != generations:
                    return  # done, or reset / released meanwhile (the visitor left): the reply is dropped
                self.a.state, self.b.state = reply[0]
                if not counted:  # the prompts are in the caches now: the limits count both sides at their size
                    LIVE.touch(self.a, self.b)
                    counted = True
                yield
        finally:
            replies.close()

    def step(self, max_new_tokens: int, budget: CallBudget = UNLIMITED) -> None:
        for _ in self._call(CallAction.STEP, max_new_tokens, budget):
            pass
        self._note_end(max_new_tokens)

    def run(self, max_new_tokens: int, budget: CallBudget = UNLIMITED):
        """Generator: both sides a step at a time until both are done (one model call)."""
        for _ in self._call(CallAction.RUN, max_new_tokens, budget):
            yield
        self._note_end(max_new_tokens)
        yield

    def _note_end(self, max_new_tokens: int) -> None:
        done = [lab.session is not None and (lab.session.finished or len(lab.session.output_ids) >= max_new_tokens)
                for lab in (self.a, self.b)]
        self.message = "Both sides done." if all(done) else ""

    def reset(self) -> None:
        """Both sides back to nothing. Their memory goes back by a collection that runs at most every few
        seconds (runtime.gc_pauses): a full one holds the interpreter for about 180 ms, and /ab_reset is
        open to anyone, in a loop."""
        self.a.reset()
        self.b.reset()
        request_collection()
        self.message = "Reset."

    def release(self) -> None:
        """The visitor left: both sides released."""
        self.a.release()
        self.b.release()

    def fail(self, error: Exception) -> None:
        """Bad overrides or input: say so; neither side changes."""
        self.message = f"⚠️ {error}"
