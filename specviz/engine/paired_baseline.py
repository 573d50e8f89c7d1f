"""Plain `ar` on the same prompt, sampling and model as a run, stepped between the run's own steps.

A speedup against `ar` is a ratio of two timings; it is fair only when both were taken under the same load.
In the app they were not: `ar` ran after the run, alone, while the run had shared the two cores with the
browser drawing each update (a Run read 0.52x in the browser and 1.42x through gradio_client). Here, after
every step of the run, `ar` steps until it has as many tokens: the two alternate every few tens of
milliseconds, so whatever else loads the machine (a browser rendering, another visitor) slows both alike,
and the ratio of their step times holds whoever watches. A browser draws each update the Run sends right
after it is sent, so the step that comes next takes the brunt: after every other update `ar` steps first
(one token ahead of the run, cut off in the result), so that the brunt falls on each of the two in turn."""

from __future__ import annotations

from dataclasses import replace

from specviz.engine.checkpoints import held_off
from specviz.engine.run import RunResult
from specviz.engine.session import Session


class PairedBaseline:
    def __init__(self, run: Session):
        self.run = run
        # the prompt's entries are the run's own (the same forward over the same tokens): copied, and charged what
        # the run's prefill took, so that the two prefills are not timed at two moments of the load (Session.start_beside)
        self.ar = Session(run.lm, "ar", sampling=run.sampling).start_beside(run)

    def follows(self, run: Session | None) -> bool:
        return run is self.run

    def keep_up(self) -> None:
        """Step `ar` until it has as many output tokens as the run (or it has finished); a call is never stopped
        meanwhile (engine.checkpoints.held_off): the run's step it catches up with is taken."""
        target = len(self.run.output_ids)
        with held_off():
            while not self.ar.finished and len(self.ar.output_ids) < target:
                self.ar.step(target)

    def lead(self) -> None:
        """One `ar` step before the run's next step (ar one token ahead at most; result() cuts it off)."""
        if not self.ar.finished and len(self.ar.output_ids) <= len(self.run.output_ids):
            with held_off():
                self.ar.step(len(self.run.output_ids) + 1)

    def covers(self, new_tokens: int) -> bool:
        return self.ar.finished or len(self.ar.output_ids) >= new_tokens

    def result(self) -> RunResult:
        """ar's run for as many tokens as the run has (ar: one token a step, so its first steps)."""
        whole = RunResult.of_session(self.ar)
        n = len(self.run.output_ids)
        if whole.new_tokens <= n:
            return whole
        records, ids = whole.records[:n], whole.output_ids[:n]
        return replace(whole, output_ids=ids, steps=n, margins=whole.margins[:n], records=records,
                       decode_s=sum(r.timings_ms.total for r in records) / 1000, finish_reason="length",
                       text=self.ar.lm.tokenizer.decode(ids, skip_special_tokens=True))
