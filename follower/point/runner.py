"""The point runner: start a backend once, measure cold start, run every point (warm-up + measured window), stop it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import platform
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import common
from common.models import ModelMeta
from common.results import ColdStart, Environment, PointResult, SearchStep, ServerStats, WindowStat
from common.spec import SLO, PointSpec
from common.traces import Trace
from follower.backends import Backend, get_backend
from follower.backends.stats import server_stats_delta
from follower.host.cpuplan import cpu_times, isolate_generator_thread, plan_cpus, steal_share, thread_run_queue_ns
from follower.host.sampler import ResourceSampler, SamplerConfig, Window, summarize
from follower.host.wakeup import WakeupHold, hold_wakeup_latency
from follower.loadgen.bodies import build_bodies, build_row_bodies
from follower.loadgen.closedloop import drive_closed
from follower.loadgen.openloop import drive
from follower.loadgen.records import LoadRecords
from follower.loadgen.scaleout import COST, drive_processes, merge, plan_generators
from follower.loadgen.schedule import point_offsets_ns
from follower.loadgen.timing import Timer
from follower.loadgen.transports import open_transport
from follower.loadgen.verdict import WindowSummary, invalid_reasons, slo_met, summarize_window
from follower.loadgen.windows import WindowMonitor, is_stable, window_stats

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
FIRST_ANSWER_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0
# Steal at or above this share of CPU time is named beside a send-lag reason.
STEAL_NOTE_SHARE = 0.01
DEFAULT_TIMER: Timer = "yield"

RecordsSink = Callable[[PointSpec, LoadRecords, WindowSummary], None]
# Receives a point's closed windows as they close (live progress); called on the generator's thread.
ProgressSink = Callable[[PointSpec, list[WindowStat]], None]


async def run_backend(
    backend_name: str,
    points: list[PointSpec],
    *,
    model: ModelMeta,
    model_path: Path,
    workdir: Path,
    env_base: dict[str, Any],
    slo: SLO | None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    timer: Timer = DEFAULT_TIMER,
    records_sink: RecordsSink | None = None,
    progress_sink: ProgressSink | None = None,
    sampling: SamplerConfig | None = None,
    samples: Mapping[str, Sequence[np.ndarray]] | None = None,
    trace: Trace | None = None,
    forced_generators: int | None = None,
    wakeup_latency_us: int | None = 0,
) -> AsyncIterator[PointResult]:
    """Serve `model` with one backend and yield a PointResult per point; the server is always stopped at the end.

    `records_sink`, if given, receives each point's raw per-request records and window summary (stage timings,
    generator CPU share and loop lag live there; PointResult has no fields for them yet). While the server runs,
    the CPUs' wake-up latency is held at `wakeup_latency_us` (follower/host/wakeup.py; None leaves the host alone).
    """
    plan = plan_cpus()
    backend = get_backend(backend_name, cpus=plan.server, server=points[0].server if points else None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    with hold_wakeup_latency(wakeup_latency_us) as wakeup:
        if wakeup.held_us is None:
            log.warning("CPU wake-up latency %s: idle CPUs may halt between requests", wakeup.describe())
        try:
            await asyncio.to_thread(backend.start, Path(model_path), model, workdir)
            to_ready_s = await asyncio.to_thread(backend.wait_ready, ready_timeout_s)
            ready_at_ns = time.monotonic_ns()
            url = backend.infer_url(model)
            first_batch = points[0].batch_size if points else 1
            probe = build_bodies(model.inputs, first_batch, seed=0, variants=1, wire=_wire(backend), samples=samples)[0]
            await first_answer(url, probe, FIRST_ANSWER_TIMEOUT_S)
            cold = ColdStart(to_ready_s=to_ready_s, to_first_answer_s=to_ready_s + (time.monotonic_ns() - ready_at_ns) / 1e9)
            log.info("%s ready in %.3fs, first answer at %.3fs", backend_name, cold.to_ready_s, cold.to_first_answer_s)
            backend_version = backend.version()
            for i, point in enumerate(points):
                result = await run_point(
                    backend,
                    point,
                    url=url,
                    model=model,
                    env_base=env_base,
                    slo=slo,
                    backend_version=backend_version,
                    cold_start=cold if i == 0 else None,
                    timer=timer,
                    records_sink=records_sink,
                    progress_sink=progress_sink,
                    sampling=sampling,
                    samples=samples,
                    trace=trace,
                    forced_generators=forced_generators,
                    wakeup=wakeup,
                )
                yield result
        finally:
            # Shielded: a second cancellation while stopping must not leave the server running.
            await asyncio.shield(asyncio.to_thread(backend.stop))


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


async def first_answer(url: str, body: bytes, timeout_s: float) -> None:
    """Send one inference request, retrying briefly, until the server answers 200 (the end of cold start)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    async with open_transport(url, max_concurrency=1, timeout_s=min(timeout_s, REQUEST_TIMEOUT_S), raw_http=False) as transport:
        encoded = transport.encode(body)
        while time.monotonic() < deadline:
            try:
                answer = await transport.request(encoded)
                if answer.status == 200:
                    return
                last = answer.error or f"status {answer.status}"
                if answer.status == 400:
                    break  # our own request is malformed: retrying cannot help
            except transport.errors as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.05)
    raise RuntimeError(f"server at {url} gave no successful inference answer within {timeout_s:g}s: {last}")


async def run_point(
    backend: Backend,
    point: PointSpec,
    *,
    url: str,
    model: ModelMeta,
    env_base: dict[str, Any],
    slo: SLO | None,
    backend_version: str,
    cold_start: ColdStart | None,
    timer: Timer = DEFAULT_TIMER,
    records_sink: RecordsSink | None = None,
    progress_sink: ProgressSink | None = None,
    sampling: SamplerConfig | None = None,
    samples: Mapping[str, Sequence[np.ndarray]] | None = None,
    trace: Trace | None = None,
    forced_generators: int | None = None,
    wakeup: WakeupHold | None = None,
) -> PointResult:
    """Measure one point (or search its highest SLO-meeting rate); a dead server gives an invalid result, not an exception."""
    kwargs: dict[str, Any] = dict(
        url=url, model=model, env_base=env_base, slo=slo, backend_version=backend_version, cold_start=cold_start,
        timer=timer, records_sink=records_sink, progress_sink=progress_sink, sampling=sampling, samples=samples,
        trace=trace, forced_generators=forced_generators, wakeup=wakeup,
    )  # fmt: skip
    if point.search is None:
        return await _measure_point(backend, point, **kwargs)
    return await _search_point(backend, point, **kwargs)


async def _search_point(backend: Backend, point: PointSpec, **kwargs: Any) -> PointResult:
    """Binary search for the highest rate whose run is valid and meets the SLO; the result is that run's.

    Each probe is a full measured run (warm-up included) with its own seed; a probe that is invalid counts as a
    failure (a rate the generator or server could not be measured at cannot be claimed). When no rate passes, the
    lowest probe's result is returned, marked with the reason.
    """
    search = point.search
    assert search is not None
    low, high = search.low, search.high
    steps: list[SearchStep] = []
    best: PointResult | None = None
    lowest: PointResult | None = None
    rate = high
    for step in range(search.max_steps):
        probe = point.model_copy(update={"rate": rate, "search": None, "seed": (point.seed + 7919 * step) % 2**32})
        result = await _measure_point(backend, probe, **kwargs)
        passed = result.valid and result.slo_met is True
        steps.append(
            SearchStep(
                rate=rate, valid=result.valid, slo_met=result.slo_met, achieved_rate=result.achieved_rate,
                p99_ms=result.latency_ms.p99 if result.latency_ms else None,
            )
        )  # fmt: skip
        if lowest is None or rate < lowest.point.rate:
            lowest = result
        if passed:
            low = rate
            if best is None or rate > best.point.rate:
                best = result
        else:
            high = rate
        # Probe order: the upper bound (passing ends the search), the lower bound (failing ends it), then bisect.
        if step == 0:
            if passed:
                break
            rate = search.low
            continue
        if step == 1 and not passed:
            break
        if (high - low) / high < search.precision:
            break
        rate = (low + high) / 2
    chosen = best or lowest
    assert chosen is not None
    reasons = list(chosen.invalid_reasons)
    if best is None:
        reasons.append(f"no rate in [{search.low:g}, {search.high:g}] req/s was valid and met the SLO")
    return chosen.model_copy(
        update={"point": point, "search": steps, "invalid_reasons": reasons, "valid": not reasons}
    )


async def _measure_point(
    backend: Backend,
    point: PointSpec,
    *,
    url: str,
    model: ModelMeta,
    env_base: dict[str, Any],
    slo: SLO | None,
    backend_version: str,
    cold_start: ColdStart | None,
    timer: Timer = DEFAULT_TIMER,
    records_sink: RecordsSink | None = None,
    progress_sink: ProgressSink | None = None,
    sampling: SamplerConfig | None = None,
    samples: Mapping[str, Sequence[np.ndarray]] | None = None,
    trace: Trace | None = None,
    forced_generators: int | None = None,
    wakeup: WakeupHold | None = None,
) -> PointResult:
    """Warm-up then measure one point against a running server."""
    started_at = datetime.now(UTC)
    replay: Trace | None = None
    if point.trace_dataset is not None:
        if trace is None or point.pattern != "trace":
            raise ValueError(f"point {point.index} replays trace {point.trace_dataset}, which was not fetched")
        replay = trace
        # The nominal rate of an uploaded trace is known only here: the entries inside the run over its duration.
        point = point.model_copy(update={"rate": max(len(trace.within(point.duration_s)), 1) / point.duration_s})
    bodies = build_bodies(model.inputs, point.batch_size, seed=point.seed, wire=_wire(backend), samples=samples)
    # One continuous schedule covers warm-up and measurement: the measured window starts with the server already
    # in steady state under this very load (queues, connections, caches), with no idle gap between the two.
    warmup_ns, duration_ns = int(round(point.warmup_s * 1e9)), int(round(point.duration_s * 1e9))
    # With a stability rule the schedule runs to its cap and the window monitor ends it once the windows agree.
    max_s = max(point.duration_s, point.stability.max_duration) if point.stability else point.duration_s
    closed = point.pattern == "closed"
    offsets = np.zeros(0, dtype=np.int64)
    body_index: np.ndarray | None = None
    if replay is not None:
        offsets, rows = _trace_schedule(replay, point.warmup_s, max_s)
        if rows is not None:
            if samples is None:
                raise ValueError(f"trace {point.trace_dataset} names request-data rows but the job has no uploaded data")
            bodies, body_index = build_row_bodies(model.inputs, point.batch_size, samples, rows, wire=_wire(backend))
    elif not closed:
        offsets = point_offsets_ns(point, max_s, point.seed) + warmup_ns
        if warmup_ns > 0:
            # Warm-up has its own stream (seed + 2**32, never a point's seed) so the measured window keeps its exact count.
            warm = point_offsets_ns(point, point.warmup_s, point.seed + 2**32)
            offsets = np.concatenate([warm, offsets])
    extra: list[str] = []
    steal: float | None = None
    monitor: WindowMonitor | None = None
    sampling = sampling or SamplerConfig()
    if sampling.gpu_indices is None:
        # Only the GPU this point's server runs on is its GPU: a CPU-served point on a GPU host gets no GPU figures
        # (the idle card's power is not the energy of its requests), a GPU point gets its own card, not the others.
        sampling = dataclasses.replace(sampling, gpu_indices=(point.server.gpu_index,) if point.server.uses_gpu else ())
    # Scale-out: as many generator processes as the target rate needs at this host's measured CPU per request,
    # up to one per generator core. Several processes cannot feed the live window monitor (it needs all records on
    # one loop): their windows are computed after the run and stability cannot end the run early.
    generator_cores = plan_cpus().generator
    gen_plan = None
    if not closed:
        gen_plan = plan_generators(point.rate, COST.estimate_s, len(generator_cores or ()), forced_generators)
        if gen_plan.saturated:
            extra.append(f"load generator {gen_plan.reason}")
    generators = 1 if gen_plan is None else gen_plan.processes
    sampler: ResourceSampler | None = None
    server_stats: ServerStats | None = None
    if not backend.alive():
        records = _unsent(offsets, "server process is not running")
        extra.append(f"server process was not running when the point started{_tail(backend)}")
    else:
        stop = threading.Event()
        steal_before = cpu_times()
        window_ns = max(int(round(point.window_s * 1e9)), 1_000_000)

        def monitor_factory(start_ns: int) -> WindowMonitor:
            nonlocal monitor
            publish = (lambda windows: progress_sink(point, windows)) if progress_sink is not None else None
            monitor = WindowMonitor(
                start_ns + warmup_ns, window_ns, min_ns=duration_ns,
                count=point.stability.windows if point.stability else None,
                tolerance=point.stability.tolerance if point.stability else 0.10,
                publish=publish,
            )  # fmt: skip
            return monitor

        # Same monotonic clock as the generator's timestamps, so the summary covers exactly the measured part.
        stats_before = await asyncio.to_thread(backend.stats)
        sampler = ResourceSampler(_server_pid(backend), sampling).start()
        try:
            if generators > 1:
                parts = await asyncio.to_thread(
                    drive_processes, url, bodies, offsets, generators, max_concurrency=point.max_concurrency,
                    body_index=body_index, cpus=sorted(generator_cores) if generator_cores else None,
                    timeout_s=REQUEST_TIMEOUT_S, timer=timer, cap_policy=point.cap_policy,
                )  # fmt: skip
                records = merge(parts, min(p.start_ns for p in parts))
            elif closed:
                records = await asyncio.to_thread(
                    _drive_closed_isolated, plan_cpus().generator, url, bodies, point.concurrency or 1,
                    warmup_ns + duration_ns, timeout_s=REQUEST_TIMEOUT_S,
                )  # fmt: skip
            else:
                records = await asyncio.to_thread(
                    _drive_isolated,
                    plan_cpus().generator,
                    url,
                    bodies,
                    offsets,
                    max_concurrency=point.max_concurrency,
                    timeout_s=REQUEST_TIMEOUT_S,
                    timer=timer,
                    stop=stop,
                    cap_policy=point.cap_policy,
                    monitor_factory=monitor_factory,
                    tick_every_ns=window_ns,
                    body_index=body_index,
                )
        finally:
            stop.set()  # on cancellation the driver thread notices within 50 ms and winds down
            samples = sampler.stop()
        steal = steal_share(steal_before, cpu_times())
        if not closed and generators == 1:
            COST.observe(records)
        if not backend.alive():
            extra.append(f"server process died during the point{_tail(backend)}")
        else:
            server_stats = server_stats_delta(stats_before, await asyncio.to_thread(backend.stats))
    measured_ns = duration_ns
    if monitor is not None and monitor.stopped_ns is not None:
        measured_ns = monitor.stopped_ns - (records.start_ns + warmup_ns)
    elif point.stability is not None and not closed:
        measured_ns = int(round(max_s * 1e9))
    measured_start = records.start_ns + warmup_ns
    window = records.window(measured_start, measured_start + measured_ns)
    summary = summarize_window(window, measured_ns / 1e9)
    window_ns = max(int(round(point.window_s * 1e9)), 1_000_000)
    windows = window_stats(records, measured_start, window_ns, measured_start + measured_ns)
    stable = is_stable(windows, point.stability.windows if point.stability else 3,
                       point.stability.tolerance if point.stability else 0.10)  # fmt: skip
    if point.stability is not None and stable is not True:
        extra.append(
            f"not stable: the last {point.stability.windows} windows did not agree within "
            f"{100 * point.stability.tolerance:g}% on throughput and p99 within {max_s:g}s"
        )
    resources = None
    if sampler is not None:
        resources = summarize(samples, Window(measured_start, measured_start + measured_ns, summary.ok), sampling)
    if records_sink is not None:
        records_sink(point, records, summary)
    reasons = invalid_reasons(summary) + extra
    if steal is not None and steal >= STEAL_NOTE_SHARE:
        # A VM whose host takes CPU time away stalls the generator however it is written: say so beside the reasons.
        reasons = [f"{r} (hypervisor steal took {100 * steal:.1f}% of CPU time)" if "send lag" in r else r for r in reasons]
    waited = records.run_queue_share
    if waited is not None and waited >= STEAL_NOTE_SHARE:
        # Other processes held the generator's core while it had requests to send (bench/send_lag_causes.py).
        reasons = [f"{r} (the generator waited {100 * waited:.1f}% of the run for its core)" if "send lag" in r else r
                   for r in reasons]  # fmt: skip
    if wakeup is not None and wakeup.held_us is None:
        # Idle CPUs halted between requests: every wake-up paid an idle-state exit (follower/host/wakeup.py).
        reasons = [f"{r} (CPU wake-up latency {wakeup.describe()})" if "send lag" in r else r for r in reasons]
    if records.scheduling and "SCHED_FIFO refused" in records.scheduling:
        # A late generator that could not be real-time: the reason says why, so the operator can fix the host.
        reasons = [f"{r} (generator thread at {records.scheduling})" if "send lag" in r else r for r in reasons]
    log.info(
        "point %d: %d req, %d ok, lag p99 %s ms, generator cpu %.0f%%, loop lag p99 %s ms, %s",
        point.index,
        summary.requests,
        summary.ok,
        summary.send_lag_ms and round(summary.send_lag_ms.p99, 3),
        100 * summary.cpu_share,
        summary.loop_lag_ms and round(summary.loop_lag_ms.p99, 3),
        reasons or "valid",
    )
    return PointResult(
        point=point,
        started_at=started_at,
        measured_s=measured_ns / 1e9,
        requests=summary.requests,
        ok=summary.ok,
        errors=summary.errors,
        error_sample=summary.error_sample,
        offered_rate=summary.offered_rate,
        achieved_rate=summary.achieved_rate,
        latency_ms=summary.latency_ms,
        service_ms=summary.service_ms,
        send_lag_ms=summary.send_lag_ms,
        cold_start=cold_start,
        valid=not reasons,
        invalid_reasons=reasons,
        slo_met=slo_met(slo, summary.latency_ms),
        environment=environment(env_base, backend_version=backend_version, seed=point.seed),
        generator_cpu_share=summary.cpu_share,
        loop_lag_ms=summary.loop_lag_ms,
        latency_ci_ms=summary.latency_ci_ms,
        latency_hdr=summary.latency_hdr,
        service_hdr=summary.service_hdr,
        stages_ms=summary.stage_means_ms,
        capped=summary.capped,
        dropped=summary.dropped,
        windows=windows,
        stable=stable,
        resources=resources,
        server_stats=server_stats,
        generators=generators,
        generator_plan=gen_plan,
        generator_scheduling=records.scheduling,
        cpu_wakeup_latency=wakeup.describe() if wakeup is not None else None,
        host_steal_share=steal,
        generator_run_queue_share=records.run_queue_share,
    )


def _trace_schedule(trace: Trace, warmup_s: float, max_s: float) -> tuple[np.ndarray, np.ndarray | None]:
    """(offsets, request-data rows) of a replayed trace: its first `warmup_s` as warm-up, then the trace itself.

    The measured part starts at warmup_s, so each measured request's intended time is its trace offset exactly.
    """
    measured, warm = trace.within(max_s), trace.within(warmup_s)
    offsets = np.concatenate([warm.offsets_ns, measured.offsets_ns + int(round(warmup_s * 1e9))])
    if measured.inputs is None or warm.inputs is None:
        return offsets, None
    return offsets, np.concatenate([warm.inputs, measured.inputs])


def environment(env_base: dict[str, Any], *, backend_version: str, seed: int) -> Environment:
    """The Environment of a point: the host facts the agent knows plus versions and the seed."""
    return Environment(
        follower_id=str(env_base.get("follower_id", "")),
        host=str(env_base.get("host", platform.node())),
        cpu_model=str(env_base.get("cpu_model", platform.processor() or platform.machine())),
        cpu_count=int(env_base.get("cpu_count", 0)),
        gpus=[str(g) for g in env_base.get("gpus", [])],
        python=platform.python_version(),
        benchfleet=common.__version__,
        backend_version=backend_version,
        seed=seed,
    )


def _unsent(offsets: np.ndarray, why: str) -> LoadRecords:
    """Records of a schedule none of which was sent (the server was gone)."""
    records = LoadRecords.allocate(time.monotonic_ns(), offsets)
    records.error_sample = why
    return records


def _server_pid(backend: Backend) -> int | None:
    """The pid of the backend's server process (the root of the tree the sampler follows), if it runs one."""
    process = getattr(backend, "process", None)
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


def _tail(backend: Backend) -> str:
    tail = getattr(backend, "log_tail", None)
    text = tail(10) if callable(tail) else ""
    return f"; server log tail:\n{text}" if text else ""


def _wire(backend: Backend) -> str:
    """The request dialect the backend speaks (KServe v2 unless it says otherwise, as TF Serving does; gRPC if asked)."""
    server = getattr(backend, "server", None)
    if getattr(server, "protocol", "http") == "grpc":
        return "grpc"
    return str(getattr(backend, "wire", "kserve"))
