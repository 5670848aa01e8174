"""The point runner: start a backend once, measure cold start, run every point (warm-up + measured window), stop it."""

from __future__ import annotations

import asyncio
import logging
import platform
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

import common
from common.models import ModelMeta
from common.results import ColdStart, Environment, PointResult
from common.spec import SLO, PointSpec
from follower.backends import Backend, get_backend
from follower.cpuplan import cpu_times, isolate_generator_thread, plan_cpus, steal_share
from follower.loadgen.bodies import build_bodies
from follower.loadgen.openloop import LoadRecords, Timer, drive
from follower.loadgen.schedule import arrival_offsets_ns
from follower.loadgen.verdict import WindowSummary, invalid_reasons, slo_met, summarize_window

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
FIRST_ANSWER_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0
# Steal at or above this share of CPU time is named beside a send-lag reason.
STEAL_NOTE_SHARE = 0.01
DEFAULT_TIMER: Timer = "yield"

RecordsSink = Callable[[PointSpec, LoadRecords, WindowSummary], None]


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
) -> AsyncIterator[PointResult]:
    """Serve `model` with one backend and yield a PointResult per point; the server is always stopped at the end.

    `records_sink`, if given, receives each point's raw per-request records and window summary (stage timings,
    generator CPU share and loop lag live there; PointResult has no fields for them yet).
    """
    plan = plan_cpus()
    backend = get_backend(backend_name, cpus=plan.server)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        await asyncio.to_thread(backend.start, Path(model_path), model, workdir)
        to_ready_s = await asyncio.to_thread(backend.wait_ready, ready_timeout_s)
        ready_at_ns = time.monotonic_ns()
        url = backend.infer_url(model)
        first_batch = points[0].batch_size if points else 1
        await first_answer(url, build_bodies(model.inputs, first_batch, seed=0, variants=1)[0], FIRST_ANSWER_TIMEOUT_S)
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
            )
            yield result
    finally:
        # Shielded: a second cancellation while stopping must not leave the server running.
        await asyncio.shield(asyncio.to_thread(backend.stop))


def _drive_isolated(cpus: frozenset[int] | None, *args: Any, **kwargs: Any) -> LoadRecords:
    """Run the generator on its own core at raised priority (see follower.cpuplan), then undo both."""
    undo = isolate_generator_thread(cpus)
    try:
        return drive(*args, **kwargs)
    finally:
        undo()


async def first_answer(url: str, body: bytes, timeout_s: float) -> None:
    """Send one inference request, retrying briefly, until the server answers 200 (the end of cold start)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=min(timeout_s, REQUEST_TIMEOUT_S))) as session:
        while time.monotonic() < deadline:
            try:
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
                    payload = await response.read()
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}: {payload[:300].decode('utf-8', 'replace')}"
                    if response.status == 400:
                        break  # our own request is malformed: retrying cannot help
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
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
) -> PointResult:
    """Warm-up then measure one point against a running server; a dead server gives an invalid result, not an exception."""
    started_at = datetime.now(UTC)
    bodies = build_bodies(model.inputs, point.batch_size, seed=point.seed)
    # One continuous schedule covers warm-up and measurement: the measured window starts with the server already
    # in steady state under this very load (queues, connections, caches), with no idle gap between the two.
    warmup_ns, duration_ns = int(round(point.warmup_s * 1e9)), int(round(point.duration_s * 1e9))
    offsets = arrival_offsets_ns(point.pattern, point.rate, point.duration_s, point.seed) + warmup_ns
    if warmup_ns > 0:
        # Warm-up has its own stream (seed + 2**32, never a point's seed) so the measured window keeps its exact count.
        warm = arrival_offsets_ns(point.pattern, point.rate, point.warmup_s, point.seed + 2**32)
        offsets = np.concatenate([warm, offsets])
    extra: list[str] = []
    steal: float | None = None
    if not backend.alive():
        records = _unsent(offsets, "server process is not running")
        extra.append(f"server process was not running when the point started{_tail(backend)}")
    else:
        stop = threading.Event()
        steal_before = cpu_times()
        try:
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
            )
        finally:
            stop.set()  # on cancellation the driver thread notices within 50 ms and winds down
        steal = steal_share(steal_before, cpu_times())
        if not backend.alive():
            extra.append(f"server process died during the point{_tail(backend)}")
    window = records.window(records.start_ns + warmup_ns, records.start_ns + warmup_ns + duration_ns)
    summary = summarize_window(window, point.duration_s)
    if records_sink is not None:
        records_sink(point, records, summary)
    reasons = invalid_reasons(summary) + extra
    if steal is not None and steal >= STEAL_NOTE_SHARE:
        # A VM whose host takes CPU time away stalls the generator however it is written: say so beside the reasons.
        reasons = [f"{r} (hypervisor steal took {100 * steal:.1f}% of CPU time)" if "send lag" in r else r for r in reasons]
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
        measured_s=point.duration_s,
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
    )


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


def _tail(backend: Backend) -> str:
    tail = getattr(backend, "log_tail", None)
    text = tail(10) if callable(tail) else ""
    return f"; server log tail:\n{text}" if text else ""
