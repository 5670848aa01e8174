"""Driving a planned point against the running server: the generator(s) on their own cores, the resource sampler
beside them, the server's own counters before and after, and whether the server survived."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.wire.results import LlmServerView, Reason, ServerStats, ShardRun
from follower.backends import Backend
from follower.backends.stats import llm_server_delta, server_stats_delta
from follower.host.cpuplan import cpu_times, isolate_generator_thread, steal_share, thread_run_queue_ns
from follower.host.sampler import ResourceSampler, Samples
from follower.loadgen.cap import CapRule, little_cap
from follower.loadgen.closedloop import drive_closed
from follower.loadgen.openloop import drive
from follower.loadgen.records import LoadRecords
from follower.loadgen.scaleout import COST, drive_processes, merge
from follower.loadgen.windows import WindowMonitor
from follower.point.context import PointContext
from follower.point.gauges import GaugeSampler, Reading
from follower.point.plan import PointPlan
from follower.protocols import protocol_of

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0


@dataclass
class Driven:
    """What driving a point produced: the records and what was measured around them."""

    records: LoadRecords
    reasons: list[Reason]  # the server was gone before, or died during, the point
    stopped_ns: int | None = None  # when the window monitor ended the run (its windows agreed)
    steal: float | None = None  # hypervisor steal over the run (share of all CPU time)
    server_stats: ServerStats | None = None
    llm_server: LlmServerView | None = None  # an LLM server's own view of the run (its metrics)
    samples: Samples | None = None  # the resource sampler's series; None where it did not run
    gauges: list[Reading] | None = None  # an LLM server's gauges read through the point (follower/point/gauges.py)
    shards: list[ShardRun] | None = None  # a sharded point's shards, as its coordinator merged them
    shard_skew_ms: float | None = None


async def drive_point(plan: PointPlan, ctx: PointContext, *, start_ns: int | None = None) -> Driven:
    """Run the plan's schedule against ctx's server; a dead server gives records of unsent requests, not an exception.
    `start_ns`: the run's start (absolute monotonic ns), one generator then drives it (a shard's common start)."""
    backend, point = ctx.backend, plan.point
    if not backend.alive():
        records = unsent(plan.offsets_ns, "server process is not running")
        why = f"server process was not running when the point started{log_tail(backend)}"
        return Driven(records, [Reason(code="server_not_running", text=why)])
    stop = threading.Event()
    steal_before = cpu_times()
    monitor: list[WindowMonitor] = []

    def monitor_factory(start_ns: int) -> WindowMonitor:
        sink = ctx.run.progress_sink
        publish = (lambda windows: sink(point, windows)) if sink is not None else None
        origin_ns = start_ns + plan.warmup_ns
        monitor.append(WindowMonitor(origin_ns, plan.window_ns, min_ns=plan.duration_ns, rule=point.stability, publish=publish))
        return monitor[0]

    # Same monotonic clock as the generator's timestamps, so the summary covers exactly the measured part.
    stats_before = await asyncio.to_thread(backend.stats)
    sampler = ResourceSampler(backend.pid(), plan.sampling).start()
    gauges = GaugeSampler(backend.stats, plan.window_ns / 1e9).start() if point.llm is not None else None
    try:
        records = await _run_generators(plan, ctx, stop, monitor_factory, start_ns)
    finally:
        stop.set()  # on cancellation the driver thread notices within 50 ms and winds down
        samples = sampler.stop()
        readings = gauges.stop() if gauges is not None else None
    driven = Driven(records, [], steal=steal_share(steal_before, cpu_times()), samples=samples, gauges=readings)
    if monitor and monitor[0].stopped_ns is not None:
        driven.stopped_ns = monitor[0].stopped_ns
    if not plan.closed and plan.processes == 1:
        COST.observe(records)
    if not backend.alive():
        driven.reasons.append(Reason(code="server_died", text=f"server process died during the point{log_tail(backend)}"))
    else:
        stats_after = await asyncio.to_thread(backend.stats)
        driven.server_stats = server_stats_delta(stats_before, stats_after)
        driven.llm_server = llm_server_delta(stats_before, stats_after)
    return driven


async def _run_generators(
    plan: PointPlan,
    ctx: PointContext,
    stop: threading.Event,
    monitor_factory: Callable[[int], WindowMonitor],
    start_ns: int | None,
) -> LoadRecords:
    point, cores = plan.point, plan.generator_cores
    endpoint = protocol_of(ctx.endpoint).route(ctx.endpoint, point.llm)
    if plan.processes > 1 and start_ns is None:
        parts = await asyncio.to_thread(
            drive_processes,
            endpoint,
            plan.bodies,
            plan.offsets_ns,
            plan.processes,
            max_concurrency=plan.cap,
            body_index=plan.body_index,
            cpus=sorted(cores) if cores else None,
            timeout_s=REQUEST_TIMEOUT_S,
            timer=ctx.run.timer,
            cap_policy=point.cap_policy,
            drain_s=plan.drain_s,
            credentials=ctx.run.credentials,
        )
        return merge(parts, min(p.start_ns for p in parts))
    if plan.closed:
        return await asyncio.to_thread(
            _drive_closed_isolated,
            cores,
            endpoint,
            plan.bodies,
            point.concurrency or 1,
            plan.warmup_ns + plan.duration_ns,
            timeout_s=REQUEST_TIMEOUT_S,
            credentials=ctx.run.credentials,
        )
    # Following the load: warm-up runs under the bound, then the cap becomes what Little's law needs at the latency seen.
    rule = None
    if plan.follow_load and plan.warmup_ns > 0:
        rule = CapRule(plan.warmup_ns, functools.partial(little_cap, rate=point.rate, bound=plan.cap))
    return await asyncio.to_thread(
        _drive_isolated,
        cores,
        endpoint,
        plan.bodies,
        plan.offsets_ns,
        max_concurrency=plan.cap,
        timeout_s=REQUEST_TIMEOUT_S,
        timer=ctx.run.timer,
        stop=stop,
        cap_policy=point.cap_policy,
        monitor_factory=monitor_factory,
        tick_every_ns=plan.window_ns,
        body_index=plan.body_index,
        cap_rule=rule,
        drain_s=plan.drain_s,
        credentials=ctx.run.credentials,
        start_ns=start_ns,
    )


def _drive_isolated(
    cpus: frozenset[int] | None,
    *args: Any,
    monitor_factory: Callable[[int], WindowMonitor] | None = None,
    **kwargs: Any,
) -> LoadRecords:
    """Run the generator on its own core at raised priority (see follower.host.cpuplan), then undo both."""
    undo = isolate_generator_thread(cpus)
    if undo.fifo_refused:
        # The operator should know why the generator is not real-time: on a shared host it decides the send lag.
        log.warning("generator thread at %s", undo.describe())
    waited0, wall0 = thread_run_queue_ns(), time.monotonic_ns()
    try:
        if monitor_factory is not None:
            # The monitor needs the run's start, which drive() fixes; build it lazily on the first tick.
            holder: dict[str, WindowMonitor] = {}

            def on_tick(rec: LoadRecords, now_ns: int) -> bool:
                if "m" not in holder:
                    holder["m"] = monitor_factory(rec.start_ns)
                return holder["m"](rec, now_ns)

            kwargs["on_tick"] = on_tick
        records = drive(*args, **kwargs)
        records.scheduling = undo.describe()
        waited1 = thread_run_queue_ns()
        if waited0 is not None and waited1 is not None:
            records.run_queue_share = (waited1 - waited0) / max(time.monotonic_ns() - wall0, 1)
        return records
    finally:
        undo()


def _drive_closed_isolated(cpus: frozenset[int] | None, *args: Any, **kwargs: Any) -> LoadRecords:
    """The closed loop on the generator's core."""
    undo = isolate_generator_thread(cpus)
    try:
        return drive_closed(*args, **kwargs)
    finally:
        undo()


def unsent(offsets: np.ndarray, why: str) -> LoadRecords:
    """Records of a schedule none of which was sent (the server was gone)."""
    records = LoadRecords.allocate(time.monotonic_ns(), offsets)
    records.error_sample = why
    return records


def log_tail(backend: Backend) -> str:
    """The end of the server's log, for a reason that says the server is gone."""
    text = backend.log_tail(10)
    return f"; server log tail:\n{text}" if text else ""
