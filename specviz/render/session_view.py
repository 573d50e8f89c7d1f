"""The presenter: what one session has on screen (OnScreen, a typed snapshot the Lab hands up) turned into the
views the panels show: the stage and step details (LabView), the Accounting tab (AccountingView), the live run's
counters and a node's p / q / p_hat chart. It reads and draws; it changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specviz.engine.divergence import classify, tie_threshold
from specviz.engine.prediction import ar_ms_per_token, speedup_check
from specviz.engine.run import RunResult
from specviz.engine.session import Session
from specviz.engine.token_diff import TokenDiff
from specviz.records.run_breakdown import CallTimes, RunBreakdown, RunTimes
from specviz.records.step import StepRecord
from specviz.render import accounting_figures
from specviz.render.accounting_figures import Lane
from specviz.render.counters import LabCounters, VersusAr, counters_markdown
from specviz.render.markdown_text import md_text
from specviz.render.recording import Recording, shown_step, user_message, why_small
from specviz.render.step_panels import (budget_split_markdown, distribution_figure, document_html, node_choices,
                                        prediction_figure, respec_step_markdown, search_step_markdown,
                                        token_diff_html, tokens_html, transfer_markdown)
from specviz.render.tree_svg import tree_html
from specviz.render.views import AccountingView, LabView

# in the text's HTML while a first visit's recording plays by itself: the page's script stops it at the first touch
AUTOPLAY_FLAG = '<span class="autoplay-flag" hidden></span>'


@dataclass(frozen=True)
class LiveRun:
    """The session's live run, with what was measured beside it."""
    session: Session
    baseline: RunResult | None     # ar on the same prompt and sampling, as many tokens as the run has
    paired: bool                   # that ar was stepped between the run's steps (same load)
    diff: TokenDiff | None         # the output against greedy decoding where the method may differ from it
    prompt: str                    # the prompt box's text the run started from
    call: CallTimes | None = None  # the newest Run call's time on the server (records.run_breakdown)

    def breakdown(self) -> RunBreakdown:
        """Where the run's time went, and the ar run's it is compared with (records.run_breakdown)."""
        session, baseline = self.session, self.baseline
        run = RunTimes.of(session.name, len(session.output_ids), session.prefill_s, session.setup_s, session.records)
        ar = None
        if baseline is not None and session.name != "ar" and baseline.records is not None:
            ar = RunTimes.of("ar", baseline.new_tokens, baseline.prefill_s, baseline.setup_s, baseline.records,
                             baseline.prefill_from)
        return RunBreakdown(run, ar, self.call)


@dataclass(frozen=True)
class OnScreen:
    """What one session shows now: the run on screen, the step and node picked, and the session's flags."""
    recording: Recording | None    # a replayed trace, else the live run once it has started
    at: int | None                 # the timeline's step; None follows the newest
    selected_node: int | None      # a node picked through its token in the text, ringed in the tree
    replay_name: str               # the replayed trace's name; "" while the live run is shown
    replay_prompt_text: str        # the replayed trace's decoded prompt ("" for the live run)
    ar_replay: Recording | None    # a replay's shipped ar trace of the same prompt (its second lane)
    live: LiveRun | None           # the session's live run, shown or not (None before the first Step)
    streaming: bool                # inside Run: still frames, the panels below the stage left as they were
    autoplay: bool                 # a first visit's recording playing by itself
    message: str

    @property
    def replaying(self) -> bool:
        return bool(self.replay_name)

    @property
    def step(self) -> int | None:
        """Index of the step on screen, None before the first."""
        return shown_step(self.recording, self.at)

    @property
    def record(self) -> StepRecord | None:
        k = self.step
        return self.recording.records[k] if k is not None else None

    @property
    def token_text(self) -> Callable[[int], str]:
        return self.recording.token_text if self.recording is not None else str


def live_counters(live: LiveRun | None) -> LabCounters | None:
    """What the counters line shows of the live run (None before there is one)."""
    if live is None:
        return None
    session, baseline = live.session, live.baseline
    figures = session.stats()
    versus = None
    if baseline and figures.wall_s and baseline.wall_s:
        ar_tokens_per_s = round(baseline.tokens_per_s, 3)
        divergence = None
        if session.temperature == 0:  # sampled runs differ from greedy by design
            divergence = classify(baseline.output_ids, baseline.margins, session.output_ids, session.margins,
                                  tie_threshold(session.lm.dtype), session.lossless)
        versus = VersusAr(ar_tokens_per_s=ar_tokens_per_s, speedup=round(figures.tokens_per_s / ar_tokens_per_s, 3),
                          identical=baseline.output_ids == session.output_ids,
                          paired=session.name != "ar" and live.paired, divergence=divergence)
    return LabCounters(mode=session.lm.mode, figures=figures, temperature=session.temperature,
                       seed=session.sampling.seed, lossless=session.lossless, acceptance=session.method.acceptance,
                       acceptance_chosen="acceptance" in session.params, versus_ar=versus,
                       last_step=session.records[-1].timings_ms if session.records else None,
                       breakdown=live.breakdown() if session.records else None)


def live_counters_markdown(live: LiveRun | None) -> str:
    return counters_markdown(live_counters(live), live.session.token_text if live is not None else str)


def timeline_markdown(screen: OnScreen) -> str:
    """Counters of the shown step when it is not the live run's newest (a past step, or a replay)."""
    recording, k = screen.recording, screen.step
    if recording is None or k is None:
        return live_counters_markdown(screen.live)
    tokens, ms = recording.tokens_until(k), recording.ms_until(k)
    t = recording.records[k].timings_ms
    return " · ".join([f"**{md_text(recording.label)}**", f"**step** {k} of {len(recording.records) - 1}",
                       f"**tokens** {tokens}", f"**mean accepted / step** {tokens / (k + 1):.2f}",
                       f"**tokens/s** {1000 * tokens / ms:.1f}" if ms else "**tokens/s** -",
                       f"**this step** {len(recording.records[k].accepted_tokens)} tokens, draft {t.draft:.1f} ms · "
                       f"verify {t.verify:.1f} ms (forward {t.forward:.1f}) · update {t.update:.1f} ms"])


def step_caption(screen: OnScreen) -> str:
    """Which step is on screen, and why its tree is empty or tiny when it is."""
    recording, k = screen.recording, screen.step
    if k is None:
        return ""
    caption = f"Showing step **{k}** of {len(recording.records) - 1}" + (
        " (the newest)" if k == len(recording.records) - 1 else " (← / → keys or the buttons move)")
    reason = why_small(recording.records[k])
    return caption + (f"  \n{reason}" if reason else "")


def document_view(screen: OnScreen) -> str:
    """RAPID: the document with the retrieved chunks highlighted ('' for other methods and for a replay)."""
    method = screen.live.session.method if screen.live is not None and not screen.replaying else None
    retrieval = getattr(method, "retrieval", None)
    if retrieval is None:
        return ""
    return document_html(method.prompt.document, retrieval.summary())


def shown_prompt(screen: OnScreen) -> str:
    """The user's message of the shown run (a recording's from its decoded prompt)."""
    if screen.replaying:
        return user_message(screen.replay_prompt_text)
    return screen.live.prompt if screen.live is not None else ""


def lanes(screen: OnScreen) -> list[Lane]:
    """The two-lane wall-clock view: the shown run, and plain ar on the same prompt when there is one (stepped
    between a live run's steps; for a replay, a shipped ar trace of the same prompt)."""
    recording = screen.recording
    if recording is None or not recording.records:
        return []
    shown = [Lane(recording.method, recording.prefill_ms, recording.records)]
    if screen.replaying:
        if screen.ar_replay is not None and recording.method != "ar":
            shown.append(Lane("ar (shipped trace)", screen.ar_replay.prefill_ms, screen.ar_replay.records))
    elif screen.live is not None and screen.live.session.name != "ar" and screen.live.baseline is not None:
        shown.append(Lane("ar", screen.live.baseline.prefill_s * 1000, screen.live.baseline.records))
    return shown


def distribution(screen: OnScreen, node_id):
    """The p / q / p_hat bars at a node of the shown step."""
    return distribution_figure(screen.record, node_id, screen.token_text)


def accounting_view(screen: OnScreen) -> AccountingView:
    """The Accounting tab up to the shown step: per-source nodes, acceptance, waste, time split, the two-lane view
    against ar, and the verify cost curve with the shown step's expected speedup."""
    recording, k = screen.recording, screen.step
    records = recording.records[:k + 1] if k is not None else []
    record = records[-1] if records else None
    curve = recording.cost_curve if recording else None
    if curve is None and not screen.replaying and screen.live is not None and screen.live.session.started:
        curve = screen.live.session.cost_curve  # loaded by the model call (budget auto), else not shown
    plan = record.plan if record else None
    draft_ms = (plan.cut.fixed_ms if plan and plan.cut else record.timings_ms.draft) if record else 0.0
    both = lanes(screen)
    ar_ms = ar_ms_per_token(both[1].records) if len(both) > 1 else None
    return AccountingView(
        sources=accounting_figures.sources_figure(records), acceptance=accounting_figures.acceptance_figure(records),
        waste=accounting_figures.waste_figure(records), time_split=accounting_figures.time_split_figure(records),
        lanes=accounting_figures.lanes_figure(both),
        cost=accounting_figures.cost_figure(curve, plan.expected_curve if plan else None,
                                            len(record.nodes) - 1 if record else None, draft_ms,
                                            plan.verify_ms if plan else None,
                                            speedup_check([record], ar_ms) if record else None,
                                            speedup_check(records, ar_ms) if records else None))


def lab_view(screen: OnScreen) -> LabView:
    """What the page shows now: the shown step is the timeline's, or the newest. A step is drawn animated (its
    draft, verify, accept and commit at the play pace) except while Run streams steps in."""
    recording, k = screen.recording, screen.step
    records = recording.records if recording else []
    token_text = screen.token_text
    shown = records[:k + 1] if k is not None else []
    record = screen.record
    newest_live = not screen.replaying and (k is None or k == len(records) - 1)
    choices = node_choices(record, token_text)
    transfer = transfer_markdown(shown, recording.lossless) if recording else ""
    animate = not screen.streaming
    document = document_view(screen)
    diff = token_diff_html(screen.live.diff if newest_live and screen.live is not None else None, token_text)
    # the panels with nothing to show, flagged on the tree box for the page's CSS: p / q / p_hat without sampling,
    # the planner's predictions where it planned nothing, the document without RAPID, the diff where there is
    # nothing to compare
    panels = {"sampling": bool(choices), "plan": any(r.plan is not None for r in records),
              "document": bool(document), "diff": bool(diff)}
    run = f"replay:{screen.replay_name}" if screen.replaying else ("live" if screen.live is not None else "")
    return LabView(
        tree=tree_html(record, token_text, animate=animate, highlight=screen.selected_node, panels=panels, run=run,
                       steps=len(records), streaming=screen.streaming),
        text_html=tokens_html(shown, token_text, shown_prompt(screen), recorded=screen.replaying,
                              animate_last=animate) + (AUTOPLAY_FLAG if screen.autoplay else ""),
        counters=live_counters_markdown(screen.live) if newest_live else timeline_markdown(screen),
        budget_split=budget_split_markdown(record),
        method_step="  \n".join(filter(None, [respec_step_markdown(record, token_text),
                                               search_step_markdown(record), transfer])),
        token_diff_html=diff,
        # while Run streams steps in, the page keeps its figures as they were (panels.lab_outputs.STREAMING_KEPT),
        # so none is built for it
        prediction=None if screen.streaming else prediction_figure(records), message=screen.message,
        document_html=document, node_choices=choices,
        distribution=None if screen.streaming else distribution(screen, choices[0][1] if choices else None),
        steps=len(records), shown_step=k, caption=step_caption(screen))


def drawn_view(screen: OnScreen, undrawable: Callable[[Exception], OnScreen]) -> LabView:
    """lab_view(screen); where it cannot be drawn (a damaged replay), lab_view of what undrawable(error) gives
    instead (the session without its replay: lab.Lab.drop_undrawable_replay)."""
    try:
        return lab_view(screen)
    except Exception as error:  # noqa: BLE001 (whatever a damaged trace breaks: said, never raised)
        return lab_view(undrawable(error))
