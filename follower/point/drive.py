"""Driving a planned point against the running server: the generator(s) on their own cores, the resource sampler
beside them, the server's own counters before and after, and whether the server survived."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from common.wire.audit import WireAudit
from common.wire.results import LlmServerView, Reason, ServerStats, ShardRun
from follower.backends import Backend
from follower.backends.llmserver import OpenAiServerBackend
from follower.backends.stats import llm_server_delta, server_stats_delta
from follower.host.cpuplan import cpu_times, steal_share
from follower.host.gate import describe_foreign, foreign_gpu_processes
from follower.host.sampler import ResourceSampler, Samples
from follower.loadgen.apart import ClosedLoopRun, Generators, OpenLoopRun, PointRun, SessionRun, Watch
from follower.loadgen.cap import CapRule, little_cap
from follower.loadgen.records import LoadRecords
from follower.loadgen.scaleout import COST, drive_processes, merge
from follower.loadgen.wireaudit import WireTap
from follower.point.context import PointContext
from follower.point.gauges import GaugeSampler, Reading
from follower.point.plan import PointPlan
from follower.protocols import Endpoint, protocol_of

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
    wire: WireAudit | None = None  # the job's `audit: wire`


async def drive_point(plan: PointPlan, ctx: PointContext, *, start_ns: int | None = None) -> Driven:
    """Run the plan's schedule against ctx's server; a dead server gives records of unsent requests, not an exception.
    `start_ns`: the run's start (absolute monotonic ns), one generator then drives it (a shard's common start)."""
    backend, point = ctx.backend, plan.point
    if not backend.alive():
        records = unsent(plan.offsets_ns, "server process is not running")
        why = f"server process was not running when the point started{log_tail(backend)}"
        return Driven(records, [Reason(code="server_not_running", text=why)])
    stop = threading.Event()
    foreign = await asyncio.to_thread(foreign_gpu_processes) if ctx.run.gpu_gate else []
    steal_before = cpu_times()
    reset = None
    if point.llm is not None and point.server.llm.reset_prefix_cache:  # the point starts with an empty prefix cache
        reset = isinstance(backend, OpenAiServerBackend) and await asyncio.to_thread(backend.reset_prefix_cache)
    # Same monotonic clock as the generator's timestamps, so the summary covers exactly the measured part.
    stats_before = await asyncio.to_thread(backend.stats)
    sampler = ResourceSampler(backend.pid(), plan.sampling).start()
    gauges = GaugeSampler(backend.stats, plan.window_ns / 1e9).start() if point.llm is not None else None
    protocol = protocol_of(ctx.endpoint)
    tap = WireTap(protocol.infer_url(protocol.route(ctx.endpoint, point.llm))) if point.audit == "wire" else None
    try:
        records, stopped_ns = await _run_generators(plan, ctx, stop, start_ns)
    finally:
        stop.set()  # on cancellation the driver thread notices within 50 ms and winds down
        samples = sampler.stop()
        readings = gauges.stop() if gauges is not None else None
        if tap is not None:
            await asyncio.to_thread(tap.stop)
    driven = Driven(records, [], steal=steal_share(steal_before, cpu_times()), samples=samples, gauges=readings)
    driven.stopped_ns = stopped_ns
    if tap is not None:
        measured_from = records.start_ns + plan.warmup_ns
        window = (measured_from, stopped_ns or measured_from + plan.duration_ns)
        driven.wire = await asyncio.to_thread(tap.audit, records, window)
    if not plan.closed and plan.processes == 1:
        COST.observe(records)
    if ctx.run.gpu_gate:  # the host's gate, re-checked at each point (a job's first point passed it at the start)
        foreign += [f for f in await asyncio.to_thread(foreign_gpu_processes) if f not in foreign]
        if foreign:
            why = f"a process that is not the follower's used the GPU during the point: {describe_foreign(foreign)}"
            driven.reasons.append(Reason(code="gpu_foreign", text=why))
    if not backend.alive():
        driven.reasons.append(Reason(code="server_died", text=f"server process died during the point{log_tail(backend)}"))
    else:
        stats_after = await asyncio.to_thread(backend.stats)
        driven.server_stats = server_stats_delta(stats_before, stats_after)
        driven.llm_server = llm_server_delta(stats_before, stats_after)
        if driven.llm_server is not None and reset is not None:
            driven.llm_server = driven.llm_server.model_copy(update={"cache_reset": reset})
    return driven


async def _run_generators(
    plan: PointPlan, ctx: PointContext, stop: threading.Event, start_ns: int | None
) -> tuple[LoadRecords, int | None]:
    """The point's records, and when its windows ended it early (None: it ran its whole schedule)."""
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
            timer=plan.timer,
            cap_policy=point.cap_policy,
            drain_s=plan.drain_s,
            credentials=ctx.run.credentials,
        )
        return merge(parts, min(p.start_ns for p in parts)), None
    run: PointRun
    if plan.sessions is not None:
        run = SessionRun(endpoint, list(plan.bodies), plan.sessions, REQUEST_TIMEOUT_S, ctx.run.credentials, cores)
    elif plan.closed:
        duration_ns = plan.warmup_ns + plan.duration_ns
        run = ClosedLoopRun(
            endpoint, list(plan.bodies), point.concurrency or 1, duration_ns, REQUEST_TIMEOUT_S, ctx.run.credentials, cores
        )
    else:
        run = _open_loop(plan, ctx, endpoint, start_ns)
    sink = ctx.run.progress_sink
    publish = (lambda windows: sink(point, windows)) if sink is not None else None
    # In the generator's own process (follower/loadgen/apart.py): the job's, or one for this point alone.
    generators = ctx.run.generators or Generators()
    try:
        ran = await asyncio.to_thread(generators.run, run, stop, publish)
    finally:
        # Cancelled: the generator ends its point now. (Its process is held by the point until it does, so closing it
        # before the stop was set waited out the whole schedule: a cancelled 30 s point took 30 s to stop.)
        stop.set()
        if ctx.run.generators is None:
            await asyncio.to_thread(generators.close)
    return ran.records, ran.stopped_ns


def _open_loop(plan: PointPlan, ctx: PointContext, endpoint: Endpoint, start_ns: int | None) -> OpenLoopRun:
    """The point's open loop, as the generator process runs it."""
    point = plan.point
    # Following the load: warm-up runs under the bound, then the cap becomes what Little's law needs at the latency seen.
    rule = None
    if plan.follow_load and plan.warmup_ns > 0:
        rule = CapRule(plan.warmup_ns, functools.partial(little_cap, rate=point.rate, bound=plan.cap))
    return OpenLoopRun(
        endpoint,
        list(plan.bodies),
        plan.offsets_ns,
        max_concurrency=plan.cap,
        timeout_s=REQUEST_TIMEOUT_S,
        timer=plan.timer,
        cap_policy=point.cap_policy,
        body_index=plan.body_index,
        cap_rule=rule,
        drain_s=plan.drain_s,
        credentials=ctx.run.credentials,
        start_ns=start_ns,
        cpus=plan.generator_cores,
        watch=Watch(plan.warmup_ns, plan.window_ns, plan.duration_ns, point.stability),
    )


def unsent(offsets: np.ndarray, why: str) -> LoadRecords:
    """Records of a schedule none of which was sent (the server was gone)."""
    records = LoadRecords.allocate(time.monotonic_ns(), offsets)
    records.error_sample = why
    return records


def log_tail(backend: Backend) -> str:
    """The end of the server's log, for a reason that says the server is gone."""
    text = backend.log_tail(10)
    return f"; server log tail:\n{text}" if text else ""
