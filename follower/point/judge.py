"""Judging a driven point: the measured window's summary, its windows and stability, the reasons it is not valid
(each naming what else held the host when the generator was late), and its resource use."""

from __future__ import annotations

from dataclasses import dataclass

from common.spec.load import Stability
from common.wire.results import LlmFigures, Reason, Resources, WindowStat
from follower.host.sampler import Window, summarize
from follower.loadgen.llmstats import llm_figures
from follower.loadgen.sessionstats import session_figures
from follower.loadgen.verdict import WindowSummary, backlog, delivered_rate, summarize_window, window_reasons
from follower.loadgen.windows import is_stable, stall, window_stats
from follower.point.context import PointContext
from follower.point.drive import Driven
from follower.point.gauges import with_gauges
from follower.point.plan import PointPlan

# Steal (or a run-queue wait) at or above this share of the run is named beside a send-lag reason.
STEAL_NOTE_SHARE = 0.01


@dataclass(frozen=True)
class Judgement:
    """The measured window's figures and the point's verdict."""

    measured_ns: int
    summary: WindowSummary
    windows: list[WindowStat]
    stable: bool | None
    reasons: list[Reason]
    resources: Resources | None
    llm: LlmFigures | None = None  # a language model's point


def judge(plan: PointPlan, driven: Driven, ctx: PointContext) -> Judgement:
    """The verdict of a driven point: pure, from the plan, the records and what was measured around them."""
    point, records = plan.point, driven.records
    measured_ns = plan.duration_ns
    if driven.stopped_ns is not None:
        measured_ns = driven.stopped_ns - (records.start_ns + plan.warmup_ns)
    elif point.stability is not None and not plan.closed:
        measured_ns = int(round(plan.max_s * 1e9))
    measured_start = records.start_ns + plan.warmup_ns
    measured_end = measured_start + measured_ns
    measured = records.window(measured_start, measured_end)
    summary = summarize_window(
        measured,
        measured_ns / 1e9,
        delivered_rate=delivered_rate(records, measured_start, measured_end),
        backlog=None if plan.closed else backlog(records, measured_start, measured_end, plan.window_ns),
    )
    windows = with_gauges(window_stats(records, measured_start, plan.window_ns, measured_end), driven.gauges, measured_start)
    stable = is_stable(windows, point.stability or Stability())
    cap = records.cap or plan.cap
    automatic = plan.follow_load and cap < plan.cap  # the load set it, below the follower's bound
    reasons = window_reasons(summary, cap, automatic=automatic) + list(plan.reasons) + driven.reasons
    if (stalled := stall(windows)) is not None:
        reasons.append(stalled)
    if point.stability is not None and stable is not True:
        reasons.append(
            Reason(
                code="unstable",
                text=(
                    f"not stable: the last {point.stability.windows} windows did not agree within "
                    f"{100 * point.stability.tolerance:g}% on throughput and p99 within {plan.max_s:g}s"
                ),
            )
        )
    llm = None
    if point.llm is not None and plan.asked_tokens is not None and plan.prompt_tokens is not None:
        inside = (records.intended_ns >= measured_start) & (records.intended_ns < measured_end)
        held, asked = plan.prompt_tokens, plan.asked_tokens
        if records.body is not None:  # a closed loop: each request's lengths are those of the body it sent
            held, asked = held[records.body], asked[records.body]
        tokens = llm_figures(measured, measured_ns / 1e9, (held[inside], asked[inside]), point.llm, ctx.run.slo, ctx.prompts)
        if tokens is not None:
            llm = tokens.figures.model_copy(update={"server": driven.llm_server})
            if plan.sessions is not None:
                inside_window = (measured_start, measured_end)
                sessions = session_figures(
                    records, plan.sessions, plan.prompt_tokens, plan.asked_tokens, inside_window, ctx.run.slo
                )
                llm = llm.model_copy(update={"sessions": sessions})
            reasons += tokens.reasons
    resources = None
    if driven.samples is not None:
        tokens_out = llm.output_tokens_server if llm is not None else 0
        window = Window(measured_start, measured_start + measured_ns, summary.ok, tokens_out)
        resources = summarize(driven.samples, window, plan.sampling)
    return Judgement(measured_ns, summary, windows, stable, _with_send_lag_causes(reasons, driven, ctx), resources, llm)


def _with_send_lag_causes(reasons: list[Reason], driven: Driven, ctx: PointContext) -> list[Reason]:
    """A send-lag reason names what else held the host while the generator was late, where it was measured."""
    notes = []
    if driven.steal is not None and driven.steal >= STEAL_NOTE_SHARE:
        # A VM whose host takes CPU time away stalls the generator however it is written.
        notes.append(f"hypervisor steal took {100 * driven.steal:.1f}% of CPU time")
    waited = driven.records.run_queue_share
    if waited is not None and waited >= STEAL_NOTE_SHARE:
        # Other processes held the generator's core while it had requests to send (bench/send_lag_causes.py).
        notes.append(f"the generator waited {100 * waited:.1f}% of the run for its core")
    if ctx.wakeup is not None and ctx.wakeup.held_us is None:
        # Idle CPUs halted between requests: every wake-up paid an idle-state exit (follower/host/wakeup.py).
        notes.append(f"CPU wake-up latency {ctx.wakeup.describe()}")
    scheduling = driven.records.scheduling
    if scheduling and "SCHED_FIFO refused" in scheduling:
        # A late generator that could not be real-time: the reason says why, so the operator can fix the host.
        notes.append(f"generator thread at {scheduling}")
    if not notes:
        return reasons
    suffix = "".join(f" ({note})" for note in notes)
    return [Reason(code=r.code, text=r.text + suffix) if r.code == "send_lag" else r for r in reasons]
