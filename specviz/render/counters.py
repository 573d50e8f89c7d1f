"""The counters line of the Lab tab: what it says of the live run (LabCounters: steps, tokens, MAT, tokens/s,
the speedup over ar, the last step's timings) and the Markdown it is drawn as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specviz.accept.sampling import ACCEPTANCE_PROMISES, SEEDED
from specviz.engine.divergence import Divergence
from specviz.engine.session import RunFigures
from specviz.records.run_breakdown import RunBreakdown
from specviz.records.step import StepTimings


@dataclass(frozen=True)
class VersusAr:
    """The run against plain ar on the same prompt, in the same mode and sampling."""
    ar_tokens_per_s: float             # tok/s: ar's, to 3 places
    speedup: float                     # x: the run's tokens/s over ar's, to 3 places
    identical: bool                    # the run's tokens are ar's
    paired: bool                       # ar was stepped between the run's steps (same load); False: run alone
    divergence: Divergence | None      # greedy runs: where and why the tokens differ from ar's (None: sampled)


@dataclass(frozen=True)
class LabCounters:
    """The values the counters line shows of a live run."""
    mode: str                          # the run mode of the model copy (runtime.modes)
    figures: RunFigures                # steps, tokens, MAT, wall s, tokens/s so far
    temperature: float                 # sampling temperature (0: greedy)
    seed: int                          # the sampling seed
    lossless: bool                     # what the method promises for its parameters at this temperature
    acceptance: str                    # the acceptance rule a sampled run uses (accept.sampling: seeded, standard)
    acceptance_chosen: bool            # the method has an acceptance parameter (the line names the rule)
    versus_ar: VersusAr | None         # None: ar not measured yet (it is, step by step with the run)
    last_step: StepTimings | None      # ms: the newest step's draft, verify, forward, update (None: no step yet)
    breakdown: RunBreakdown | None = None  # where the run's and ar's time went, and the Run call's besides


def counters_markdown(counters: LabCounters | None, token_text: Callable[[int], str] = str) -> str:
    """The counters line; token_text names the tokens where a greedy run differs from ar."""
    if counters is None:
        return "**steps** 0 · **tokens** 0"
    c, figures = counters, counters.figures
    parts = [f"**mode** {c.mode}", f"**steps** {figures.steps}", f"**tokens** {figures.new_tokens}",
             f"**mean accepted / step** {figures.mean_accepted:.2f}", f"**tokens/s** {figures.tokens_per_s:.1f}"]
    if c.temperature > 0 and c.acceptance_chosen:
        parts.append(f"**acceptance** {c.acceptance} ({ACCEPTANCE_PROMISES[c.acceptance]})")
    versus = c.versus_ar
    if versus is not None:
        if c.temperature > 0:  # the seed fixes ar's draws (accept.position_noise): same tokens
            seeded = f"sampled at temperature {c.temperature:g}, seed {c.seed}"
            same = (f"identical to ar {seeded}" if versus.identical else
                    f"{seeded}: eta > 0 moved the tokens from ar's (lossy, see below)" if not c.lossless
                    else f"{seeded}: the standard rule's own tokens" if c.acceptance != SEEDED
                    else f"⚠️ {seeded}: the tokens differ from ar's with the same seed")
        else:
            same = ("identical to greedy ar" if versus.identical else
                    versus.divergence.describe(token_text) if versus.divergence is not None
                    else "differs from greedy ar")
        how = "stepped between this run's steps, so both ran under the same load" if versus.paired else "run alone"
        parts.append(f"**speedup vs ar** {versus.speedup:.2f}x (ar in the same mode and sampling, {how}: "
                     f"{versus.ar_tokens_per_s:.1f} tok/s; {same})")
    else:
        parts.append("**speedup vs ar** measured step by step with the run")
    if c.last_step is not None:
        t = c.last_step
        parts.append(f"**last step** draft {t.draft:.1f} ms · verify {t.verify:.1f} ms "
                     f"(forward {t.forward:.1f}) · update {t.update:.1f} ms")
    line = " · ".join(parts)
    return line + breakdown_markdown(c.breakdown) if c.breakdown is not None else line


def breakdown_markdown(b: RunBreakdown) -> str:
    """The breakdown behind the counters line: a table of where each run's counted time went, then what the Run's
    call spent on the server that neither counts (a <details> block, closed)."""
    sides = [b.run] + ([b.ar] if b.ar is not None else [])
    rows = [("the drafters' set-up (indexes of the prompt)", "setup_ms"), ("prefill forward", "prefill_ms"),
            ("drafting (and the planner's cut)", "draft_ms"), ("verify forwards", "forward_ms"),
            ("acceptance", "accept_ms"), ("updates (caches, drafters, planner, records)", "update_ms")]
    header = "| ms | " + " | ".join(f"{side.method} ({side.tokens} tokens)" for side in sides) + " |"
    lines = [header, "|---|" + "---:|" * len(sides)]
    lines += [f"| {label} | " + " | ".join(f"{getattr(side, name):.1f}" for side in sides) + " |" for label, name in rows]
    lines.append("| **counted** (tokens/s divides by it) | " + " | ".join(f"**{side.counted_ms:.1f}**" for side in sides)
                 + " |")
    lines.append("| steps: how many, the first, a typical one | " + " | ".join(
        f"{side.steps}: {side.first_step_ms:.1f}, {side.median_step_ms:.1f}" for side in sides) + " |")
    text = "\n".join(lines)
    if b.ar is not None and b.ar.prefill_from:
        text += (f"\n\nar's prefill forward is {b.ar.prefill_from}'s: the same forward over the same prompt, run once "
                 "(its cache entries copied, bitwise the same) and counted on both sides at the time it took.")
    if b.call is not None:
        call = b.call
        text += (f"\n\nNot counted by either (this Run's call on the server): {call.frames} frames sent to the page, "
                 f"drawn in {call.drawing_ms:.0f} ms and handed on in {call.sending_ms:.0f} ms; "
                 f"{b.bookkeeping_ms:.0f} ms of bookkeeping between steps (the diff against greedy, the accounting's "
                 "curve, ar's result)")
        text += (f"; {call.quiet_wait_ms:.0f} ms waited before the first forward, until the other processes on these "
                 "cores (a browser drawing the click) went quiet: the prefill is counted on both sides, so taken under "
                 "their burst it understated the speedup." if call.quiet_wait_ms >= 1 else ".")
    return f"\n\n<details><summary>Where this run's time went</summary>\n\n{text}\n\n</details>"
