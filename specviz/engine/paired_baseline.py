"""Plain `ar` on the same prompt, sampling and model as a run, stepped between the run's own steps.

A speedup against `ar` is a ratio of two timings; it is fair only when both were taken under the same load.
In the app they were not: `ar` ran after the run, alone, while the run had shared the two cores with the
browser drawing each update (a Run read 0.52x in the browser and 1.42x through gradio_client). Here, after
every step of the run, `ar` steps until it has as many tokens: the two alternate every few tens of
milliseconds, so whatever else loads the machine (a browser rendering, another visitor) slows both alike,
and the ratio of their step times holds whoever watches.

A browser draws each update the Run sends right after it is sent, on the same cores where it shares them: the
steps of the next tens of milliseconds take the brunt. Taken in turns, the run (a third of the time on a prompt it
copies) took half of it: its verify forwards read 37% slower on the page than through the API where ar's read 20%
(conv-trip, 2-core AMD EPYC). So after an update one side steps first for LEAD_MS, the one whose share of the updates
it took so far is furthest below its share of the two runs' step time: the drawing slows each in proportion to its
own time, as a steady load would. ar may run up to LEAD_TOKENS ahead; the result cuts it to the run's tokens."""

from __future__ import annotations

import time
from dataclasses import replace

from specviz.engine.checkpoints import held_off
from specviz.engine.run import RunResult
from specviz.engine.session import Session

LEAD_MS = 60.0    # after an update, the side that takes the brunt steps first for this long (a frame's drawing)
LEAD_TOKENS = 8   # ar at most this many tokens ahead of the run (cut off in the result)


class PairedBaseline:
    def __init__(self, run: Session):
        self.run = run
        # the prompt's entries are the run's own (the same forward over the same tokens): copied, and charged what
        # the run's prefill took, so that the two prefills are not timed at two moments of the load (Session.start_beside)
        self.ar = Session(run.lm, "ar", sampling=run.sampling).start_beside(run)
        self.updates = 0     # updates sent so far
        self.ar_led = 0      # of them, those after which ar stepped first

    def follows(self, run: Session | None) -> bool:
        return run is self.run

    def keep_up(self) -> None:
        """Step `ar` until it has as many output tokens as the run (or it has finished); a call is never stopped
        meanwhile (engine.checkpoints.held_off): the run's step it catches up with is taken."""
        target = len(self.run.output_ids)
        with held_off():
            while not self.ar.finished and len(self.ar.output_ids) < target:
                self.ar.step(target)

    def brunt_to_ar(self) -> bool:
        """After an update: whether ar steps first (it took fewer of the updates so far than its share of the two
        runs' step time), else the run does; counted as taken."""
        ar_ms = sum(r.timings_ms.total for r in self.ar.records)
        run_ms = sum(r.timings_ms.total for r in self.run.records)
        share = ar_ms / (ar_ms + run_ms) if ar_ms + run_ms > 0 else 0.5
        self.updates += 1
        to_ar = self.ar_led < share * self.updates
        self.ar_led += to_ar
        return to_ar

    def lead(self, max_new_tokens: int, for_ms: float = LEAD_MS) -> None:
        """ar steps first after an update, for about for_ms (at most LEAD_TOKENS ahead of the run, within the call's
        token limit); a call is never stopped meanwhile (engine.checkpoints.held_off)."""
        started = time.perf_counter()
        ahead = min(len(self.run.output_ids) + LEAD_TOKENS, max_new_tokens)
        with held_off():
            while (not self.ar.finished and len(self.ar.output_ids) < ahead
                   and (time.perf_counter() - started) * 1000 < for_ms):
                self.ar.step(len(self.ar.output_ids) + 1)

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
