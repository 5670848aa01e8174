"""The validity verdict: a point whose numbers cannot be trusted is marked invalid with a reason, never reported silently."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from common.loadspec import P99_MIN_SAMPLES
from common.results import Percentiles, Reason
from common.spec import SLO
from common.stats import block_bootstrap_ci, encode, histogram_of, summarize_ns
from follower.loadgen.records import DROPPED, OPTIONAL_STAGES, STAGES, LoadRecords

# MEASUREMENT.md's rules.
SEND_LAG_P99_MAX_MS = 1.0  # a generator that sends late measures its own lateness, not the server
RATE_TOLERANCE = 0.02  # achieved vs offered
MIN_COMPLETED = P99_MIN_SAMPLES  # a p99 claim at 99% confidence needs >= 459 samples (MLPerf LoadGen)
CPU_SHARE_MAX = 0.90  # the generator's event loop is one thread: above 90% of a core it is saturated
ERROR_RATE_MAX = 0.01


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


def summarize_window(records: LoadRecords, duration_s: float) -> WindowSummary:
    """Summarise the requests of a measured window (records already cut to it by intended time).

    Offered and achieved rates both count by *intended* time in the window: offered = scheduled / duration,
    achieved = answered 200 / duration. Counting the same requests on both sides makes the comparison exact
    (a Poisson schedule's realised count differs from rate x duration by ~1/sqrt(n), which is noise, not a
    generator fault); a request intended in the window that is answered after it still counts, because its
    lateness already shows in latency-from-intended, and one never answered counts against achieved.
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
    return WindowSummary(
        duration_s=duration_s,
        requests=n,
        ok=n_ok,
        # Never-sent requests (a stopped run, a dead server) are neither ok nor errors: the rate rule catches them.
        errors=int((sent & ~ok).sum()),
        offered_rate=n / duration_s,
        achieved_rate=n_ok / duration_s,
        latency_ms=summarize_ns(records.done_ns[ok] - records.intended_ns[ok]),
        service_ms=summarize_ns(records.done_ns[ok] - records.sent_ns[ok]),
        # A request sent early by a rounding nanosecond has lag 0, which the histogram clamps to its 1 ns floor.
        send_lag_ms=summarize_ns(np.maximum(records.sent_ns[sent] - records.intended_ns[sent], 0)),
        cpu_share=records.cpu_share,
        loop_lag_ms=summarize_ns(np.maximum(records.loop_lag_ns, 0)),
        stages_ms=stages,
        error_sample=records.error_sample,
        stage_means_ms=stage_breakdown(records),
        latency_ci_ms=cis or None,
        latency_hdr=encode(latency_hist) if n_ok else None,
        service_hdr=encode(service_hist) if n_ok else None,
        capped=int(capped.sum()),
        dropped=int((records.status == DROPPED).sum()),
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
    out["service"] = float(service.mean()) / 1e6
    return out


def window_reasons(summary: WindowSummary) -> list[Reason]:
    """Every rule the window breaks, as a sentence a user can act on; empty when the point is valid."""
    reasons: list[Reason] = []
    if summary.send_lag_ms is None:
        reasons.append(Reason(code="no_requests", text="no request was sent in the measured window"))
    elif summary.send_lag_ms.p99 > SEND_LAG_P99_MAX_MS:
        reasons.append(
            Reason(
                code="send_lag",
                text=f"send lag p99 {summary.send_lag_ms.p99:.3f} ms exceeds {SEND_LAG_P99_MAX_MS:g} ms: "
                "the generator (or its host) could not send on time",
            )
        )
    if summary.offered_rate > 0:
        miss = abs(summary.achieved_rate - summary.offered_rate) / summary.offered_rate
        if miss > RATE_TOLERANCE:
            reasons.append(
                Reason(
                    code="rate_missed",
                    text=f"achieved rate {summary.achieved_rate:.1f} req/s misses the offered "
                    f"{summary.offered_rate:.1f} req/s by {100 * miss:.1f}% (> {100 * RATE_TOLERANCE:g}%)",
                )
            )
    if summary.ok < MIN_COMPLETED:
        reasons.append(
            Reason(
                code="too_few",
                text=f"only {summary.ok} requests completed; a p99 needs >= {MIN_COMPLETED} (raise duration or rate)",
            )
        )
    if summary.cpu_share > CPU_SHARE_MAX:
        reasons.append(
            Reason(
                code="generator_saturated",
                text=f"load generator used {100 * summary.cpu_share:.0f}% of a core (> {100 * CPU_SHARE_MAX:g}%): "
                "it was saturated",
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


def slo_met(slo: SLO | None, latency_ms: Percentiles | None) -> bool | None:
    """Whether latency-from-intended meets the SLO's p50/p99; None when there is no objective to judge."""
    if slo is None or (slo.p50_ms is None and slo.p99_ms is None):
        return None
    if latency_ms is None:
        return False
    if slo.p50_ms is not None and latency_ms.p50 > slo.p50_ms:
        return False
    return not (slo.p99_ms is not None and latency_ms.p99 > slo.p99_ms)
