"""bench/loadgen.py's section 5: what the generator costs on one pinned core, beside Triton's perf_analyzer in the same run.

Against a KServe v2 server that answers at once (bench/wire_tensor.py's, on the other core), at a ladder of Poisson rates:
  - ours as a job runs it: the default timer (its wake margin following its wake-ups), a 1 s warm-up after which the
    in-flight cap follows the load (follower/loadgen/cap.py), and the point's own verdict on the measured part
    (follower/loadgen/verdict.py: send lag, rate, cap, errors, saturation); its CPU per request (its run's process CPU
    over the requests it sent; "(work)": less the time it spun before sends, a lower bound since answers read during a
    spin count as spinning), its send-lag p99, the cap it ended with;
  - ours with the busy-wait tail (`load.busy_wait`): the same, spinning the last timing.BUSY_TAIL_NS before each send;
  - perf_analyzer (C++, bench/install_peers.sh), pinned to the same core at SCHED_FIFO: its CPU per request (its whole
    run's CPU over every request the server's port saw) and whether it kept the rate (its own count of delayed
    requests, and the achieved rate within 2%).
Ratios: ours' CPU per request over perf_analyzer's at each rate; the busy tail's send-lag p99 over the default timer's.
"""

from __future__ import annotations

import asyncio
import functools
import time

import numpy as np
import uvloop
from wire_tensor import PERF_ANALYZER, fast_server, perf_analyzer

from common.stats import quantile
from follower.loadgen.cap import CapRule, little_cap
from follower.loadgen.openloop import DEFAULT_LEAD_NS, run_open_loop
from follower.loadgen.records import LoadRecords
from follower.loadgen.schedule import arrival_offsets_ns
from follower.loadgen.timing import Timer
from follower.loadgen.verdict import backlog, delivered_rate, summarize_window, window_reasons
from follower.protocols import Endpoint, protocol_of

BODY = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
WARMUP_S = 1.0
BOUND = 4096  # the follower's default max_in_flight: what the automatic cap is bounded by


def ours(url: str, rate: float, seconds: float, timer: Timer) -> tuple[dict[str, float], str]:
    """One point as the follower drives it (automatic cap after the warm-up), judged by the point's own rules: its
    figures, and why it is invalid (empty when valid)."""
    offsets = arrival_offsets_ns("poisson", rate, WARMUP_S + seconds, seed=int(rate))
    endpoint = Endpoint("kserve-http", url, "m")
    rule = CapRule(int(WARMUP_S * 1e9), functools.partial(little_cap, rate=rate, bound=BOUND))

    async def main() -> LoadRecords:
        opened = protocol_of(endpoint).open_transport(endpoint, max_concurrency=BOUND, timeout_s=30.0)
        async with opened as transport:
            start = time.monotonic_ns() + DEFAULT_LEAD_NS
            return await run_open_loop(transport, [BODY], offsets, start, max_concurrency=BOUND, timer=timer, cap_rule=rule)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        rec = runner.run(main())
    start, end = rec.start_ns + int(WARMUP_S * 1e9), rec.start_ns + int((WARMUP_S + seconds) * 1e9)
    summary = summarize_window(
        rec.window(start, end),
        seconds,
        delivered_rate=delivered_rate(rec, start, end),
        backlog=backlog(rec, start, end, 500_000_000),
    )
    reasons = window_reasons(summary, rec.cap)
    sent = rec.sent
    lag_us = (rec.sent_ns[sent] - rec.intended_ns[sent]) / 1e3
    return {
        "cpu_us": 1e6 * rec.cpu_s / max(int(sent.sum()), 1),
        "work_us": 1e6 * rec.work_cpu_s / max(int(sent.sum()), 1),
        "lag_p99_us": quantile(lag_us, 0.99),
        "valid": float(not reasons),
        "cap": float(rec.cap or 0),
        "margin_us": (rec.wake_margin_ns or 0) / 1e3,
    }, "; ".join(r.text for r in reasons)[:300]


def run(rates: list[float], seconds: float, gen_core: int, srv_core: int, results: dict[str, float]) -> None:
    print(f"{'rate':>6} {'client':<16} {'cpu µs/req':>10} {'(work)':>7} {'lag p99 µs':>10} {'cap':>5} {'valid':>5}")
    with fast_server(srv_core) as url:
        ours(url, 500, 1.0, "yield")  # warm the path
        for rate in rates:
            runs = {"ours": ours(url, rate, seconds, "yield"), "ours busy-wait": ours(url, rate, seconds, "busy")}
            for name, (r, why) in runs.items():
                row = f"{rate:6g} {name:<16} {r['cpu_us']:10.1f} {r['work_us']:7.1f} {r['lag_p99_us']:10.1f} {r['cap']:5.0f}"
                print(f"{row} {'yes' if r['valid'] else 'NO':>5}" + (f"  ({why})" if why else ""))
            o, b = runs["ours"][0], runs["ours busy-wait"][0]
            key = f"{rate:g}"
            results.update(
                {
                    f"cost_cpu_us_{key}": round(o["cpu_us"], 1),
                    f"cost_valid_{key}": o["valid"],
                    f"cost_cap_{key}": o["cap"],
                    f"cost_lag_p99_us_{key}": round(o["lag_p99_us"], 1),
                    f"cost_busy_lag_p99_us_{key}": round(b["lag_p99_us"], 1),
                    f"cost_busy_valid_{key}": b["valid"],
                    f"cost_busy_vs_default_lag_{key}": round(b["lag_p99_us"] / o["lag_p99_us"], 3) if o["lag_p99_us"] else np.nan,
                }
            )
            if PERF_ANALYZER.exists():
                pa = perf_analyzer(url, rate, seconds, gen_core)
                verdict = "yes" if pa["valid"] else "NO"
                print(f"{rate:6g} {'perf_analyzer':<16} {pa['cpu_us_per_request']:10.1f} {'':>7} {'':>10} {'':>5} {verdict:>5}")
                results.update(
                    {
                        f"cost_pa_cpu_us_{key}": round(pa["cpu_us_per_request"], 1),
                        f"cost_pa_valid_{key}": pa["valid"],
                        f"cost_vs_pa_{key}": round(o["cpu_us"] / pa["cpu_us_per_request"], 3),
                    }
                )
    if not PERF_ANALYZER.exists():
        print(f"perf_analyzer: not installed ({PERF_ANALYZER.parent} missing; bench/install_peers.sh makes it)")
