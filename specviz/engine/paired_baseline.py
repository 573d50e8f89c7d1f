"""Plain `ar` on the same prompt, sampling and model as a run, stepped between the run's own steps.

A speedup against `ar` is a ratio of two timings; it is fair only when both were taken under the same load.
In the app they were not: `ar` ran after the run, alone, while the run had shared the two cores with the
browser drawing each update (a Run read 0.52x in the browser and 1.42x through gradio_client). Here, after
every step of the run, `ar` steps until it has as many tokens: the two alternate every few tens of
milliseconds, so whatever else loads the machine (a browser rendering, another visitor) slows both alike,
and the ratio of their step times holds whoever watches."""

from __future__ import annotations

from specviz.engine.run import RunResult
from specviz.engine.session import Session


class PairedBaseline:
    def __init__(self, run: Session):
        self.run = run
        self.ar = Session(run.lm, "ar", sampling=run.sampling).start_ids(run.prompt_ids)

    def follows(self, run: Session | None) -> bool:
        return run is self.run

    def keep_up(self) -> None:
        """Step `ar` until it has as many output tokens as the run (or it has finished)."""
        target = len(self.run.output_ids)
        while not self.ar.finished and len(self.ar.output_ids) < target:
            self.ar.step(target)

    def covers(self, new_tokens: int) -> bool:
        return self.ar.finished or len(self.ar.output_ids) >= new_tokens

    def result(self) -> RunResult:
        return RunResult.of_session(self.ar)
