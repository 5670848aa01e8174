"""Measurement windows: per-window throughput and latency during a run, and the stability rule over them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

from common.spec.load import Stability
from common.stats import quantile
from common.wire.results import Reason, WindowStat
from follower.loadgen.llmrecords import ttft_ns
from follower.loadgen.records import LoadRecords


def window_stats(
    records: LoadRecords, origin_ns: int, window_ns: int, now_ns: int, first_ns: int | None = None
) -> list[WindowStat]:
    """Stats of every whole window in [first_ns, now_ns), windows aligned on `origin_ns` (the measured start).

    A request still in flight counts with its age so far (now − intended) as a lower bound of its latency, so an
    overloaded server shows in the window at once instead of vanishing from it.
    """
    first_ns = origin_ns if first_ns is None else first_ns
    k0 = int(np.floor((first_ns - origin_ns) / window_ns))
    k1 = int(np.floor((now_ns - origin_ns) / window_ns))  # windows [k0, k1) have ended
    out: list[WindowStat] = []
    if k1 <= k0:
        return out
    intended = records.intended_ns
    for k in range(k0, k1):
        a, b = origin_ns + k * window_ns, origin_ns + (k + 1) * window_ns
        lo, hi = np.searchsorted(intended, a), np.searchsorted(intended, b)
        if hi <= lo:
            out.append(WindowStat(t_s=(a - origin_ns) / 1e9, duration_s=window_ns / 1e9, requests=0, ok=0, throughput=0.0))
            continue
        status = records.status[lo:hi]
        done = records.done_ns[lo:hi]
        sent = records.sent_ns[lo:hi]
        ok = (status == 200) & (done >= 0)
        in_flight = (sent >= 0) & (done < 0)
        lat = np.concatenate([done[ok] - intended[lo:hi][ok], now_ns - intended[lo:hi][in_flight]])
        lag = sent[sent >= 0] - intended[lo:hi][sent >= 0]
        tokens_per_s = ttft_p99 = itl_p50 = None
        if records.llm is not None:
            times = records.llm.token_times[lo:hi]
            gaps = [np.diff(t) for t, answered in zip(times, ok, strict=True) if answered and t is not None and len(t) > 1]
            itl_p50 = quantile(np.concatenate(gaps), 0.5) / 1e6 if gaps else None
            served = records.llm.completion_tokens[lo:hi][ok]
            tokens_per_s = float(np.maximum(served, 0).sum()) / (window_ns / 1e9)
            first = records.llm.first_token_ns(int(lo), int(hi))
            waiting = (sent >= 0) & (first < 0) & (done < 0)
            # Requests still waiting for their first token count with the time they have waited so far.
            ttft = np.concatenate([ttft_ns(first, intended[lo:hi]), now_ns - intended[lo:hi][waiting]])
            ttft_p99 = quantile(ttft, 0.99) / 1e6 if len(ttft) else None
        out.append(
            WindowStat(
                t_s=(a - origin_ns) / 1e9,
                duration_s=window_ns / 1e9,
                requests=int(hi - lo),
                ok=int(ok.sum()),
                throughput=float(ok.sum()) / (window_ns / 1e9),
                p50_ms=quantile(lat, 0.5) / 1e6 if len(lat) else None,
                p99_ms=quantile(lat, 0.99) / 1e6 if len(lat) else None,
                send_lag_p99_ms=quantile(np.maximum(lag, 0), 0.99) / 1e6 if len(lag) else None,
                tokens_per_s=tokens_per_s,
                ttft_p99_ms=ttft_p99,
                itl_p50_ms=itl_p50,
            )
        )
    return out


def is_stable(windows: list[WindowStat], rule: Stability) -> bool | None:
    """Whether the last `rule.windows` windows agree within `rule.tolerance` of their mean on throughput and p99; None
    if too few."""
    count, tolerance = rule.windows, rule.tolerance
    last = [w for w in windows if w.t_s >= 0][-count:]
    if len(last) < count:
        return None
    for values in ([w.throughput for w in last], [w.p99_ms for w in last]):
        if any(v is None for v in values):
            return False
        arr = np.asarray(values, dtype=np.float64)
        mean = arr.mean()
        if mean <= 0 or np.max(np.abs(arr - mean)) / mean > tolerance:
            return False
    return True


# A window is a stall when its p99 is this many times the others' median p99, and at least this much above it: the
# ratio alone would flag a noisy host's 5 ms window among 0.5 ms ones, the margin alone a slow server's ordinary spread.
STALL_FACTOR = 10.0
STALL_MIN_MS = 500.0


def stall(windows: list[WindowStat]) -> Reason | None:
    """The worst window of the measured part if it stands out as a stall (checked on every point, with or without
    a stability rule), as the reason that names its time; None when the windows hold together (or are too few)."""
    measured = [w for w in windows if w.t_s >= 0 and w.p99_ms is not None]
    if len(measured) < 3:
        return None
    worst = max(measured, key=lambda w: w.p99_ms or 0.0)
    others = float(np.median([w.p99_ms for w in measured if w is not worst]))
    p99 = worst.p99_ms or 0.0
    if p99 < STALL_FACTOR * others or p99 - others < STALL_MIN_MS:
        return None
    return Reason(
        code="unsteady",
        text=(
            f"unsteady: the window {worst.t_s:g}-{worst.t_s + worst.duration_s:g} s into the measured part had p99 "
            f"{p99:.0f} ms against {others:.1f} ms in the others (a stall); the point's figures include it"
        ),
    )


class WindowMonitor:
    """A tick callback for the driver: closes windows as time passes, publishes them, stops once stable.

    `min_ns` is the shortest measured part; with a stability `rule`, the run ends at the first window boundary past it
    at which the rule holds (the schedule itself is the cap).
    """

    def __init__(
        self,
        origin_ns: int,
        window_ns: int,
        *,
        min_ns: int,
        rule: Stability | None = None,
        publish: Callable[[list[WindowStat]], None] | None = None,
    ) -> None:
        self.origin_ns = origin_ns
        self.window_ns = window_ns
        self.min_ns = min_ns
        self.rule = rule
        self.publish = publish
        self.windows: list[WindowStat] = []
        self.stopped_ns: int | None = None

    def __call__(self, records: LoadRecords, now_ns: int) -> bool:
        """Close the windows that ended (one window behind, so most answers are in); True to end the run."""
        done_until = now_ns - self.window_ns
        closed_until = self.origin_ns + (len([w for w in self.windows if w.t_s >= 0])) * self.window_ns
        if done_until < closed_until + self.window_ns:
            return False
        new = window_stats(records, self.origin_ns, self.window_ns, done_until, first_ns=closed_until)
        new = [w for w in new if w.t_s >= 0]
        if not new:
            return False
        self.windows.extend(new)
        if self.publish is not None:
            # Progress is best effort: a failed publish must never end a measurement.
            with contextlib.suppress(Exception):
                self.publish(list(self.windows))
        measured_end = self.origin_ns + len(self.windows) * self.window_ns
        if self.rule is None or measured_end - self.origin_ns < self.min_ns:
            return False
        if is_stable(self.windows, self.rule):
            self.stopped_ns = measured_end
            return True
        return False
