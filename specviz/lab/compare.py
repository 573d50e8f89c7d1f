"""A/B compare: two configurations on the same prompt, each a Lab, stepping together or run to the end.
A side is the page's settings with overrides written as NAME=VALUE pairs ("method=respec tau=3")."""

from __future__ import annotations

from dataclasses import dataclass, field

from specviz.engine.token_diff import token_diff
from specviz.errors import SpecvizError, quoted
from specviz.runtime.gc_pauses import request_collection
from specviz.lab.fair_share import UNLIMITED, CallBudget
from specviz.lab.lab import Lab
from specviz.lab.live_sessions import LIVE
from specviz.lab.lab_state import CallAction, ModelCall
from specviz.render.views import CompareView
from specviz.render.tree_svg import tree_html
from specviz.render.step_panels import token_diff_html, tokens_html
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

    def apply(self, base: VisitorRequest | dict, overrides_a: str, overrides_b: str,
              policy: Policy = Policy.private()) -> None:
        """Both sides from the page's request (or Lab.apply's loose keyword arguments) with each side's overrides;
        a side whose settings are bad is named, and neither changes."""
        if not isinstance(base, VisitorRequest):
            base = VisitorRequest.of_loose(base, policy)
        sides = []
        for name, overrides in (("A", overrides_a), ("B", overrides_b)):
            try:
                sides.append(side_request(base, overrides, policy))
            except SpecvizError as error:
                raise SpecvizError(f"Side {name}: {error}") from None
        self.a.take(sides[0].settings)
        self.b.take(sides[1].settings)
        self.message = ""

    def _call(self, action: CallAction, max_new_tokens: int, budget: CallBudget = UNLIMITED):
        """One model call on both sides' states (ui.gpu): each reply becomes the sides' states."""
        from specviz.lab import model_calls

        if self.a.wanted is None or self.b.wanted is None:
            raise SpecvizError("No prompt yet: enter a prompt (or pick an example) first.")
        call = ModelCall(action, (self.a.wanted, self.b.wanted), int(max_new_tokens))
        LIVE.touch(self.a, self.b)
        generations = (self.a.generation, self.b.generation)
        replies = model_calls.call(call, [self.a.state, self.b.state], budget)
        try:
            while True:
                with self.a.stepping, self.b.stepping:  # held while the call works, not while a reply is shown
                    reply = next(replies, None)
                if reply is None or (self.a.generation, self.b.generation) != generations:
                    return  # done, or reset / released meanwhile (the visitor left): the reply is dropped
                self.a.state, self.b.state = reply[0]
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

    def summary(self, lab: Lab, side: str) -> str:
        session = lab.session
        if session is None:
            return f"**{side}**: not started"
        stats = session.stats()
        params = ", ".join(f"{k}={v}" for k, v in sorted(lab.settings.params)) or "no parameters"
        return (f"**{side}: {session.name}** ({params}; budget {session.budget}; "
                f"temperature {session.temperature:g}) · **steps** {stats.steps} · **tokens** {stats.new_tokens} · "
                f"**MAT** {stats.mean_accepted:.2f} · **tokens/s** {stats.tokens_per_s:.1f} · "
                f"{'lossless' if session.lossless else 'lossy'}")

    def diff(self):
        """The two outputs' difference (None before both have output)."""
        a, b = self.a.session, self.b.session
        if a is None or b is None or not a.output_ids or not b.output_ids:
            return None
        n = min(len(a.output_ids), len(b.output_ids))
        return token_diff(a.output_ids[:n], b.output_ids[:n])

    def fail(self, error: Exception) -> None:
        """Bad overrides or input: say so; neither side changes."""
        self.message = f"⚠️ {error}"

    def view(self) -> CompareView:
        """Both sides' last trees, texts and summaries, B's difference from A, the message."""
        shown = []
        for lab in (self.a, self.b):
            records = lab.session.records if lab.session else []
            token_text = lab.session.token_text if lab.session else str
            tree = tree_html(records[-1] if records else None, token_text, run="live" if lab.session else "",
                             steps=len(records))
            shown.append((tree, tokens_html(records, token_text)))
        diff = self.diff()
        token_text = self.a.session.token_text if self.a.session else str
        if diff is None:
            diff_html = ""
        else:  # struck through: A's tokens; highlighted: what B emitted instead
            diff_html = token_diff_html(diff, token_text, reference="side A")
        return CompareView(tree_a=shown[0][0], tree_b=shown[1][0], text_a=shown[0][1], text_b=shown[1][1],
                           summary_a=self.summary(self.a, "A"), summary_b=self.summary(self.b, "B"),
                           diff_html=diff_html, message=self.message)
