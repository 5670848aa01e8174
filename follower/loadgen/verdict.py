"""The validity verdict: a point whose numbers cannot be trusted is marked invalid with a reason, never reported silently."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from common.spec.grid import DRAIN_MAX_S, DRAIN_MIN_S
from common.spec.load import P99_MIN_SAMPLES
from common.spec.slo import SLO
from common.stats import block_bootstrap_ci, encode, histogram_of, summarize_ns
from common.wire.results import SERVICE_TOTAL, LlmFigures, Percentiles, Reason
from follower.loadgen.records import DROPPED, NOT_SENT, OPTIONAL_STAGES, STAGES, UNANSWERED, LoadRecords

# MEASUREMENT.md's rules.
SEND_LAG_P99_MAX_MS = 1.0  # a generator that sends late measures its own lateness, not the server
RATE_TOLERANCE = 0.02  # achieved vs offered
MIN_COMPLETED = P99_MIN_SAMPLES  # a p99 claim at 99% confidence needs >= 459 samples (MLPerf LoadGen)
SERVER_QUEUED_MIN_MS = 0.5  # a queue inside the server adds at least this much (below it, host noise)
CPU_SHARE_MAX = 0.90  # the generator's event loop is one thread: above 90% of a core it is saturated
ERROR_RATE_MAX = 0.01


@dataclass(frozen=True)
class Backlog:
    """Requests due and not yet answered (waiting for a slot, or sent and unanswered) at each window boundary; the
    server's own answer time (answer - send, p50) of the requests sent in the measured part's last window, and the
    least of it over the run's windows from its start (warm-up included): the server with the least load on it."""

    counts: list[int]
    service_least_ms: float | None = None
    service_last_ms: float | None = None

    @property
    def growth(self) -> int:
        """How many more were waiting at the end of the measured part than at its start."""
        return self.counts[-1] - self.counts[0] if self.counts else 0

    def grew(self, requests: int) -> bool:
        """A backlog that grows across the windows: by more than 2% of the window's requests (at least 10), and in at
        least two thirds of the windows: the load outran the server (or the in-flight cap) for the whole window."""
        steps = np.diff(self.counts)
        return bool(len(steps) and self.growth > max(10, 0.02 * requests) and (steps > 0).sum() >= 2 * len(steps) / 3)

    def server_queued(self) -> bool:
        """Requests queued inside the server: its answer time at the end is half as long again as its least (and
        longer by SERVER_QUEUED_MIN_MS). A server at its capacity answers the requests it holds in turn, so its time
        grows with what it is sent, and a higher in-flight cap would only lengthen its queue; a server held back by
        the cap answers in its least time however many wait for a slot."""
        least, last = self.service_least_ms, self.service_last_ms
        return least is not None and last is not None and last >= 1.5 * least and last - least >= SERVER_QUEUED_MIN_MS


def backlog(records: LoadRecords, start_ns: int, end_ns: int, window_ns: int) -> Backlog:
    """The backlog at each window boundary of [start_ns, end_ns] over the whole run's records, and the server's answer
    time in the last window and at its least over the windows since the run's start."""
    live = (records.status != DROPPED) & (records.status != NOT_SENT)
    due = np.sort(records.intended_ns[live])
    done = np.sort(records.done_ns[live & (records.done_ns >= 0)])
    step = max(window_ns, 1)
    bounds = np.arange(start_ns, end_ns + 1, step)
    counts = np.searchsorted(due, bounds, side="right") - np.searchsorted(done, bounds, side="right")
    # Answer times in send order, so each window's are one slice (one pass over the run, however many windows).
    answered = records.ok & (records.sent_ns >= 0)
    order = np.argsort(records.sent_ns[answered], kind="stable")
    sent = records.sent_ns[answered][order]
    service = (records.done_ns[answered] - records.sent_ns[answered])[order]

    def service_ms(a: int, b: int, least: int = 1) -> float | None:
        lo, hi = np.searchsorted(sent, [a, b], side="left")
        return float(np.median(service[lo:hi])) / 1e6 if hi - lo >= least else None

    first = min(records.start_ns, start_ns)
    medians = [service_ms(a, a + step, least=5) for a in range(first, end_ns - step + 1, step)]
    known = [m for m in medians if m is not None]
    return Backlog([int(c) for c in counts], min(known) if known else None, service_ms(end_ns - step, end_ns))


def delivered_rate(records: LoadRecords, start_ns: int, end_ns: int) -> float:
    """Answers (200) the server completed per second over the measured window shifted by its median latency.

    Counted over the whole run, so in a steady state the requests finishing in the shifted window are as many as were
    sent in the window, whatever the latency; an overloaded server completes only what it can, however many were
    sent. Answers that arrive after the window (a growing backlog) do not count as throughput.
    """
    ok = records.ok & (records.done_ns >= 0)
    inside = ok & (records.intended_ns >= start_ns) & (records.intended_ns < end_ns)
    if not inside.any() or end_ns <= start_ns:
        return 0.0
    shift = int(np.median(records.done_ns[inside] - records.intended_ns[inside]))
    done = records.done_ns[ok]
    completed = int(((done >= start_ns + shift) & (done < end_ns + shift)).sum())
    return completed / ((end_ns - start_ns) / 1e9)


@dataclass
class WindowSummary:
    """Figures of the measured window, everything the verdict and a PointResult need."""

    duration_s: float
    requests: int  # scheduled with an intended time in the window
    ok: int
    errors: int  # sent but not answered 200 (HTTP error, transport error, still pending at the end)
    offered_rate: float
    achieved_rate: float
    latency_ms: Percentiles | None  # done - intended, ok requests
    service_ms: Percentiles | None  # done - sent, ok requests
    send_lag_ms: Percentiles | None  # sent - intended, every sent request
    cpu_share: float
    loop_lag_ms: Percentiles | None
    stages_ms: dict[str, Percentiles | None] = field(default_factory=dict)
    error_sample: str | None = None
    stage_means_ms: dict[str, float] | None = None  # per-stage means that sum to the mean service time
    latency_ci_ms: dict[str, tuple[float, float]] | None = None
    latency_hdr: str | None = None
    service_hdr: str | None = None
    capped: int = 0
    dropped: int = 0
    send_lag_uncapped_ms: Percentiles | None = None  # send lag of the requests that found a free in-flight slot
    backlog: Backlog | None = None  # requests not yet answered at each window boundary (None: not computed)
    unanswered: int = 0  # sent and still unanswered when the run ended (its drain bound ran out): latency unknown
    spin_share: float = 0.0  # of cpu_share, the dispatcher spinning before sends (timing.WakeMargin), not work


def summarize_window(
    records: LoadRecords, duration_s: float, *, delivered_rate: float | None = None, backlog: Backlog | None = None
) -> WindowSummary:
    """Summarise the requests of a measured window (records already cut to it by intended time).

    Offered = scheduled / duration. Achieved counts the same requests (answered 200, over the duration), exact in a
    steady state; when the backlog grew across the windows (answers fell behind: they came after the window), it is
    `delivered_rate` instead, what the server completed per second over the window (see delivered_rate()).
    """
    ok = records.ok
    sent = records.sent
    n, n_ok = len(records), int(ok.sum())
    stages: dict[str, Percentiles | None] = {}
    for stage in STAGES:
        values = records.stages_ns[stage][ok]
        stages[stage] = summarize_ns(values[values >= 0])
    latency_ns = records.done_ns[ok] - records.intended_ns[ok]
    service_ns = records.done_ns[ok] - records.sent_ns[ok]
    latency_hist, service_hist = histogram_of(latency_ns.tolist()), histogram_of(service_ns.tolist())
    # Block bootstrap over intended time: slow answers come in bursts, so requests are not independent samples.
    bounds = block_bootstrap_ci(records.intended_ns[ok], latency_ns, (0.50, 0.99)) or []
    cis = {name: (lo / 1e6, hi / 1e6) for name, (lo, hi) in zip(("p50", "p99"), bounds, strict=False)}
    capped = records.capped if len(records.capped) == n else np.zeros(n, dtype=bool)
    behind = backlog is not None and backlog.grew(n)
    return WindowSummary(
        duration_s=duration_s,
        requests=n,
        ok=n_ok,
        # Never-sent requests (a stopped run, a dead server) are neither ok nor errors: the rate rule catches them.
        errors=int((sent & ~ok).sum()),
        offered_rate=n / duration_s,
        achieved_rate=delivered_rate if delivered_rate is not None and behind else n_ok / duration_s,
        latency_ms=summarize_ns(records.done_ns[ok] - records.intended_ns[ok]),
        service_ms=summarize_ns(records.done_ns[ok] - records.sent_ns[ok]),
        # A request sent early by a rounding nanosecond has lag 0, which the histogram clamps to its 1 ns floor.
        send_lag_ms=summarize_ns(np.maximum(records.sent_ns[sent] - records.intended_ns[sent], 0)),
        cpu_share=records.cpu_share,
        spin_share=records.spin_share,
        loop_lag_ms=summarize_ns(np.maximum(records.loop_lag_ns, 0)),
        stages_ms=stages,
        error_sample=records.error_sample,
        stage_means_ms=stage_breakdown(records),
        latency_ci_ms=cis or None,
        latency_hdr=encode(latency_hist) if n_ok else None,
        service_hdr=encode(service_hist) if n_ok else None,
        capped=int(capped.sum()),
        dropped=int((records.status == DROPPED).sum()),
        send_lag_uncapped_ms=summarize_ns(np.maximum(records.sent_ns[sent & ~capped] - records.intended_ns[sent & ~capped], 0)),
        backlog=backlog,
        unanswered=int((records.status == UNANSWERED).sum()),
    )


def stage_breakdown(records: LoadRecords) -> dict[str, float] | None:
    """Mean time per stage (ms) over answered requests that carry server timings; sums to their mean service time.

    Server stages come from the answer's `parameters` (decode = server pre-processing, queue, infer, encode =
    post-processing and serialisation); `transmission` is what remains of the client-measured service time (network,
    HTTP framing, the server's request handling outside those stages). Client serialisation happens once before the
    run (bodies are pre-encoded), so it is not on the request path and is reported with the bodies, not here.
    """
    ok = records.ok
    have = ok.copy()
    for stage in STAGES:
        if stage not in OPTIONAL_STAGES:
            have &= records.stages_ns[stage] >= 0
    if not have.any():
        return None
    service = (records.done_ns[have] - records.sent_ns[have]).astype(np.float64)
    out: dict[str, float] = {}
    server_total = np.zeros(int(have.sum()))
    for stage in STAGES:
        values = records.stages_ns[stage][have].astype(np.float64)
        if stage in OPTIONAL_STAGES:
            if not (values >= 0).any():
                continue  # no server-side processor ran: no such stage (rather than a stage of 0 ms)
            values = np.maximum(values, 0)
        out[stage.removesuffix("_ns")] = float(values.mean()) / 1e6
        server_total += values
    out["transmission"] = float((service - server_total).mean()) / 1e6
    out[SERVICE_TOTAL] = float(service.mean()) / 1e6
    return out


def window_reasons(summary: WindowSummary, max_concurrency: int | None = None, *, automatic: bool = False) -> list[Reason]:
    """Every rule the window breaks, as a sentence a user can act on; empty when the point is valid.

    A load the point could not carry is blamed where the records place it: the server (answers fell behind while
    requests found free in-flight slots), the in-flight cap (requests waited for a slot, and that wait is the lateness),
    or the generator (requests that had a free slot still left late). `automatic`: the cap is one the load set (the
    user set none, and it stayed below the follower's bound): any request that waited for it is named, however few
    (a silent client-side queue otherwise), unless the server is the limit.
    """
    reasons: list[Reason] = []
    # The server is the limit when answers fell behind and either no request waited for a slot, or requests queued
    # inside the server (its answer time grew from its least: whatever the cap did, a higher one would only lengthen
    # that queue), or requests it was sent were still unanswered when the run's drain ended (it held them longer than
    # the bound); a backlog of requests waiting for slots while the server answers as fast as ever is the cap's.
    saturated = (
        summary.backlog is not None
        and summary.backlog.grew(summary.requests)
        and (not summary.capped or summary.backlog.server_queued() or summary.unanswered > 0)
    )
    lag = summary.send_lag_ms
    if lag is None:
        reasons.append(Reason(code="no_requests", text="no request was sent in the measured window"))
    else:
        own = summary.send_lag_uncapped_ms
        if own is not None and own.p99 > SEND_LAG_P99_MAX_MS:
            reasons.append(
                Reason(
                    code="send_lag",
                    text=(
                        f"send lag p99 {own.p99:.3f} ms (of requests that had a free in-flight slot) exceeds "
                        f"{SEND_LAG_P99_MAX_MS:g} ms: the generator (or its host) could not send on time"
                    ),
                )
            )
        if summary.capped and automatic and not saturated and lag.p99 <= SEND_LAG_P99_MAX_MS:
            reasons.append(
                Reason(
                    code="cap_reached",
                    text=(
                        f"{summary.capped} requests waited for the automatic in-flight cap of {max_concurrency} (up to "
                        f"{lag.max:.1f} ms before they could be sent); latency from the intended time includes that wait. "
                        "Set load.max_concurrency above the bursts"
                    ),
                )
            )
        if summary.capped and lag.p99 > SEND_LAG_P99_MAX_MS and not saturated:  # raising the cap would change it
            cap = f"all {max_concurrency}" if max_concurrency else "all"
            share = 100 * summary.capped / max(summary.requests, 1)
            # Requests with a free slot left late too: the host stalled, and the slots filled while nothing could run.
            stalled = own is not None and own.p99 > SEND_LAG_P99_MAX_MS
            advice = (
                "Requests with a free slot were late as well (above): the host stalled and the slots filled meanwhile, so "
                "measure again on a quieter host before raising the cap"
                if stalled
                else "Raise the cap (load.max_concurrency; unset, it follows the load up to the follower's max_in_flight) "
                "to the rate x the server's latency"
            )
            reasons.append(
                Reason(
                    code="cap_reached",
                    text=(
                        f"the in-flight cap was reached: {summary.capped} requests ({share:.1f}%) found {cap} slots busy and "
                        f"waited for one (send lag p99 {lag.p99:.1f} ms); latency from the intended time includes that wait. "
                        f"{advice}"
                    ),
                )
            )
    miss = abs(summary.achieved_rate - summary.offered_rate) / summary.offered_rate if summary.offered_rate > 0 else 0.0
    if saturated and summary.backlog is not None:
        counts = summary.backlog.counts
        waited = ""
        if summary.capped and lag is not None and lag.p99 > SEND_LAG_P99_MAX_MS:
            waited = (
                f"; {summary.capped} requests waited for a free in-flight slot (send lag p99 {lag.p99:.1f} ms), held back by "
                "the server's own backlog: a higher cap would queue them inside the server instead"
            )
        reasons.append(
            Reason(
                code="server_saturated",
                text=(
                    f"the server could not keep up: it delivered {summary.achieved_rate:.1f} of the {summary.offered_rate:.1f} "
                    f"req/s offered, and the requests waiting for an answer grew from {counts[0]} to {counts[-1]} across the "
                    f"measured windows{waited}"
                ),
            )
        )
    elif miss > RATE_TOLERANCE:
        reasons.append(
            Reason(
                code="rate_missed",
                text=(
                    f"achieved rate {summary.achieved_rate:.1f} req/s misses the offered {summary.offered_rate:.1f} req/s "
                    f"by {100 * miss:.1f}% (> {100 * RATE_TOLERANCE:g}%)"
                ),
            )
        )
    if summary.ok < MIN_COMPLETED:
        reasons.append(
            Reason(
                code="too_few",
                text=f"only {summary.ok} requests completed; a p99 needs >= {MIN_COMPLETED} (raise duration or rate)",
            )
        )
    # A dispatcher spinning before a send had nothing else due: that part of its core is not load it could not carry.
    working = summary.cpu_share - summary.spin_share
    if working > CPU_SHARE_MAX:
        spun = f" ({100 * summary.spin_share:.0f}% more spinning before sends)" if summary.spin_share >= 0.005 else ""
        reasons.append(
            Reason(
                code="generator_saturated",
                text=f"load generator used {100 * working:.0f}% of a core (> {100 * CPU_SHARE_MAX:g}%){spun}: it was saturated",
            )
        )
    if summary.dropped:
        reasons.append(
            Reason(
                code="dropped",
                text=f"{summary.dropped} requests were dropped at the concurrency cap (max_concurrency reached): the server "
                "could not keep up with the offered load",
            )
        )
    if summary.unanswered:
        reasons.append(
            Reason(
                code="unanswered",
                text=(
                    f"{summary.unanswered} requests were still unanswered when the run ended (the wait for answers after the "
                    f"last request was due is the point's duration, bounded to {DRAIN_MIN_S:g}-{DRAIN_MAX_S:g} s): their "
                    "latency is unknown, longer than that wait, and not in the percentiles, which cover the answered requests"
                ),
            )
        )
    if summary.requests > 0 and summary.errors / summary.requests > ERROR_RATE_MAX:
        sample = f"; first: {summary.error_sample}" if summary.error_sample else ""
        reasons.append(
            Reason(
                code="errors",
                text=f"{summary.errors} of {summary.requests} requests failed ({100 * summary.errors / summary.requests:.1f}% > "
                f"{100 * ERROR_RATE_MAX:g}%){sample}",
            )
        )
    return reasons


def slo_met(slo: SLO | None, latency_ms: Percentiles | None, llm: LlmFigures | None = None) -> bool | None:
    """Whether the point meets the SLO: latency-from-intended within its p50/p99, and for a language model with
    per-request limits, the share of requests meeting them (goodput_share) at least its attainment; None when there is
    no objective to judge."""
    if slo is None or not (slo.percentiles or slo.per_request):
        return None
    met = True
    if slo.percentiles:
        if latency_ms is None:
            return False
        met = not (slo.p50_ms is not None and latency_ms.p50 > slo.p50_ms) and not (
            slo.p99_ms is not None and latency_ms.p99 > slo.p99_ms
        )
    if slo.per_request and llm is not None:
        met = met and llm.goodput_share is not None and llm.goodput_share >= slo.attainment
    return met if (slo.percentiles or llm is not None) else None
