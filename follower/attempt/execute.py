"""Run one attempt of a job: claim it, fetch the model, run every point, report each, close the attempt."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

from common import tracing
from common.logs import JOB_ID
from common.spec.grid import server_runs
from common.spec.job import PointSpec
from common.wire.jobs import Claim, FinishReport, JobTask, PointReport
from common.wire.results import PointResult
from follower.attempt.model_cache import fetch_model
from follower.attempt.prompt_data import resolve_prompt_set
from follower.attempt.request_data import (
    resolve_labels,
    resolve_request_data,
    resolve_truth,
    with_client_stages,
    write_calibration,
)
from follower.attempt.target import fleet_services, resolve_target
from follower.attempt.trace_data import resolve_trace
from follower.backends.onnxruntime import CALIBRATION_FILE
from follower.convert.signature import check_before_serving
from follower.host.sampler import SamplerConfig
from follower.link.leader_client import LeaderClient, LeaderRejected, StaleAttempt
from follower.link.metrics import METRICS
from follower.link.outbox import Outbox
from follower.link.progress import ProgressReporter, resolve_address
from follower.loadgen.apart import Generators
from follower.loadgen.calibrate import TargetCosts
from follower.loadgen.records import LoadRecords, encode_records
from follower.loadgen.verdict import WindowSummary
from follower.point.colocate import run_colocated
from follower.point.context import HostFacts, ServerRun, ShardLink
from follower.point.runner import run_backend
from follower.protocols.transports import NO_CREDENTIALS, Credentials
from follower.settings import FollowerSettings

log = logging.getLogger(__name__)

# How often a running attempt looks at its cancel flag (the heartbeat reply sets it).
CANCEL_POLL_S = 0.1


async def _run_points(
    task: JobTask, client: LeaderClient, settings: FollowerSettings, model_path: Path, host_facts: HostFacts
) -> None:
    workdir = settings.jobs_dir / f"{task.job_id}-{task.attempt}"
    workdir.mkdir(parents=True, exist_ok=True)
    outbox = Outbox(settings.work_dir / "outbox")
    credentials = NO_CREDENTIALS
    if task.spec.target is not None:  # an endpoint already running: its secrets and its signature (from its metadata)
        fleet = fleet_services(settings, settings.telemetry_address or client.telemetry_address)
        model, credentials = await asyncio.to_thread(resolve_target, task, client, settings.follower_id, fleet)
        task = task.model_copy(update={"model": model})
    if task.model.format != "endpoint":
        # Refuse a model that does not match the job (or its own metadata) before any server starts.
        await asyncio.to_thread(check_before_serving, task.spec, task.model, model_path)
    blobs: dict[int, dict[int | None, bytes]] = {}  # raw records per point index: the point's (None) and each probe's
    address = resolve_address(settings.telemetry_address or client.telemetry_address, settings.leader_url)
    reporter = None
    if address is not None:
        reporter = ProgressReporter(
            address,
            client.credential,
            job_id=task.job_id,
            attempt=task.attempt,
            follower_id=settings.follower_id,
            tls=settings.leader_url.startswith("https://"),
            ca_file=settings.leader_ca_file,
        )
    try:
        await _run_backends(task, client, settings, workdir, outbox, blobs, model_path, host_facts, reporter, credentials)
    finally:
        if reporter is not None:
            await asyncio.to_thread(reporter.close)
    # Every point must be acknowledged before the attempt is closed (the leader counts them).
    await asyncio.to_thread(outbox.deliver, client, task.job_id)


async def _run_backends(
    task: JobTask,
    client: LeaderClient,
    settings: FollowerSettings,
    workdir: Path,
    outbox: Outbox,
    blobs: dict[int, dict[int | None, bytes]],
    model_path: Path,
    host_facts: HostFacts,
    reporter: ProgressReporter | None,
    credentials: Credentials,
) -> None:
    def keep_records(point: PointSpec, records: LoadRecords, summary: WindowSummary, probe: int | None = None) -> None:
        blobs.setdefault(point.index, {})[probe] = encode_records(records)

    sampling = SamplerConfig(
        interval_s=settings.sample_interval_s,
        grid_g_co2_per_kwh=settings.grid_g_co2_per_kwh,
        instance_price_per_hour=settings.instance_price_per_hour,
    )
    # Request data (uploaded or sample images) is fetched and preprocessed once for every backend of the job.
    samples, client_ms = await asyncio.to_thread(
        resolve_request_data, task.spec.data, task.model, client=client, cache_dir=settings.work_dir / "data-cache"
    )
    if any(p.server.precision == "int8_static" for p in task.points):  # the samples static INT8 calibrates on
        await asyncio.to_thread(write_calibration, samples, task.model, workdir / CALIBRATION_FILE)
    # The labels a client-side post-processor looks up (an uploaded set's labels.txt).
    labels = await asyncio.to_thread(resolve_labels, task.spec.data, client=client, cache_dir=settings.work_dir / "data-cache")
    # Each sample's true class, for the job's quality checks (only fetched when it asks for them).
    truth = targets = None
    if task.spec.quality is not None:
        truth, targets = await asyncio.to_thread(
            resolve_truth, task.spec.data, client=client, cache_dir=settings.work_dir / "data-cache"
        )
    # An uploaded trace (load.trace: {dataset: ID}) is fetched the same way, once, and replayed by every backend.
    trace = await asyncio.to_thread(resolve_trace, task.spec, client=client, cache_dir=settings.work_dir / "data-cache")
    # A language model's uploaded prompt set (llm.dataset: ID), the same way.
    prompt_rows = await asyncio.to_thread(
        resolve_prompt_set, task.spec, client=client, cache_dir=settings.work_dir / "data-cache"
    )
    shard = None
    if task.shard is not None:  # this follower's share of every point, from the common start
        shard = ShardLink(client, task.shard.of, task.shard.index, task.shard.count, task.attempt, settings.follower_id)
    generators = Generators()  # the open loop's own processes, for every point of the attempt
    run = ServerRun(
        model=task.model,
        model_path=model_path,
        workdir=workdir,
        host_facts=host_facts,
        slo=task.spec.slo,
        ready_timeout_s=settings.server_ready_timeout_s,
        records_sink=keep_records,
        progress_sink=reporter.sink if reporter is not None else None,
        sampling=sampling,
        samples=samples,
        trace=trace,
        prompt_rows=prompt_rows,
        forced_generators=settings.generators,
        wakeup_latency_us=settings.cpu_wakeup_latency_us,
        gpu_gate=settings.wait_for_gpu,
        max_in_flight=settings.max_in_flight,
        network=task.spec.network,
        target=task.spec.target,
        credentials=credentials,
        shard=shard,
        target_costs=TargetCosts(settings.target_costs_path),
        postprocess=task.spec.data.postprocess if task.spec.data.processing == "client" else None,
        labels=labels,
        quality=task.spec.quality,
        truth=truth,
        targets=targets,
        reference=(task.points[0].backend, task.points[0].server) if task.spec.quality and task.spec.quality.agreement else None,
        generators=generators,
    )
    sources: list[AsyncIterator[PointResult]]
    try:
        await asyncio.to_thread(generators.prepare)  # started before the server: no point waits for it
        if task.spec.colocate is not None:  # every model alone, then each pair at once (follower/point/colocate.py)
            models = [(task.model, model_path)]
            for other in task.colocated:
                models.append((other, (await asyncio.to_thread(fetch_model, client, other, settings.cache_dir))[0]))
            backend = task.points[0].backend
            sources = [run_colocated(backend, task.points, run, models=models, colocate=task.spec.colocate)]
        else:  # one server start per run of points sharing it: a backend's points, or each round's with fresh servers
            runs = server_runs(task.points, task.spec.repeats.fresh_server)
            sources = [run_backend(points[0].backend, points, run) for points in runs]
        for source in sources:
            async for result in source:
                p99 = f"{result.latency_ms.p99:.2f}" if result.latency_ms else "-"
                log.info(
                    "job %s point %d: %d requests, p99 %s ms, valid=%s %s",
                    task.job_id,
                    result.point.index,
                    result.requests,
                    p99,
                    result.valid,
                    "; ".join(result.invalid_reasons),
                )
                result = with_client_stages(result, client_ms)
                METRICS.point_done(result)
                report = PointReport(attempt=task.attempt, follower_id=settings.follower_id, result=result)
                with tracing.span("point.upload", attributes={"benchfleet.point": result.point.index}):
                    await _upload(task, report, blobs.pop(result.point.index, {}), client, outbox)

    finally:
        await asyncio.to_thread(generators.close)


async def _upload(
    task: JobTask, report: PointReport, blobs: dict[int | None, bytes], client: LeaderClient, outbox: Outbox
) -> None:
    """A point's report, then its raw records. On disk first (a leader outage loses nothing), then sent; the server is
    idle between points meanwhile."""
    index = report.result.point.index
    await asyncio.to_thread(outbox.put, task.job_id, report)
    await asyncio.to_thread(outbox.flush, client, task.job_id)
    for probe, blob in blobs.items():
        try:
            await asyncio.to_thread(client.upload_records, task.job_id, task.attempt, index, blob, probe)
        except StaleAttempt:
            raise
        except Exception as exc:
            # Raw records are supplementary (the summary and histogram are in the report): log, go on.
            log.warning("job %s point %d: records upload failed: %s", task.job_id, index, exc)


async def _until_cancelled(coro: Coroutine[Any, Any, None], cancel: threading.Event | None) -> bool:
    """Run the attempt's points; when `cancel` is set, cancel them (the runner stops the server). False if cancelled."""
    task = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.wait({task}, timeout=CANCEL_POLL_S)
        if cancel is not None and cancel.is_set() and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return False
    task.result()
    return True


def execute(
    payload: dict,
    *,
    settings: FollowerSettings,
    client: LeaderClient,
    incarnation: str,
    host_facts: HostFacts,
    cancel: threading.Event | None = None,
) -> str:
    """Run the attempt the payload names; returns its outcome (succeeded, failed or stale). The attempt is a span of
    the job's trace (common/tracing.py), claim, fetch, each server start and point, uploads and finish spans in it."""
    task = JobTask.model_validate(payload)
    JOB_ID.set(task.job_id)  # log lines of this attempt carry the job id (the Celery task runs in a fresh context)
    attributes: tracing.Attributes = {
        "benchfleet.job_id": task.job_id,
        "benchfleet.attempt": task.attempt,
        "benchfleet.follower_id": settings.follower_id,
    }
    try:
        with tracing.span("job.attempt", parent=task.traceparent, attributes=attributes):
            return _attempt(task, settings=settings, client=client, incarnation=incarnation, host_facts=host_facts, cancel=cancel)
    finally:
        tracing.flush()
        JOB_ID.set(None)


def _attempt(
    task: JobTask,
    *,
    settings: FollowerSettings,
    client: LeaderClient,
    incarnation: str,
    host_facts: HostFacts,
    cancel: threading.Event | None,
) -> str:
    claim = Claim(attempt=task.attempt, follower_id=settings.follower_id, incarnation=incarnation)
    try:
        with tracing.span("job.claim"):
            task = client.claim(task.job_id, claim)
    except (StaleAttempt, LeaderRejected) as exc:
        log.info("job %s attempt %d is no longer ours (%s); dropping the message", task.job_id, task.attempt, exc)
        return "stale"
    log.info("job %s attempt %d claimed: %d points", task.job_id, task.attempt, len(task.points))
    claimed_at = time.monotonic()  # the attempt's run time is monotonic: a step of the wall clock does not change it
    METRICS.job_started(task)
    outcome = "failed"
    try:
        if task.model.format == "endpoint":  # a target's model: nothing to fetch
            model_path = settings.work_dir
        else:
            with tracing.span("model.fetch", attributes={"benchfleet.model": task.model.ref}):
                model_path, cached = fetch_model(client, task.model, settings.cache_dir)
            log.info("model %s %s", task.model.ref, "from cache" if cached else "downloaded")
        if not asyncio.run(_until_cancelled(_run_points(task, client, settings, model_path, host_facts), cancel)):
            log.info("job %s attempt %d cancelled by the leader: point stopped, server stopped", task.job_id, task.attempt)
            outcome = "cancelled"
            return outcome
        done = FinishReport(
            attempt=task.attempt, follower_id=settings.follower_id, state="succeeded", elapsed_s=time.monotonic() - claimed_at
        )
        with tracing.span("job.finish"):
            client.finish(task.job_id, done)
        log.info("job %s attempt %d succeeded", task.job_id, task.attempt)
        outcome = "succeeded"
        return outcome
    except StaleAttempt:
        log.info("job %s attempt %d was withdrawn by the leader (cancelled or requeued)", task.job_id, task.attempt)
        outcome = "stale"
        return outcome
    except Exception as exc:  # the attempt fails with its reason; the agent lives on
        reason = f"{type(exc).__name__}: {exc}"
        log.exception("job %s attempt %d failed", task.job_id, task.attempt)
        failed = FinishReport(
            attempt=task.attempt,
            follower_id=settings.follower_id,
            state="failed",
            error=reason[:2000],
            elapsed_s=time.monotonic() - claimed_at,
        )
        with contextlib.suppress(StaleAttempt, LeaderRejected):
            client.finish(task.job_id, failed)
        return "failed"
    finally:
        # the job's directory (server logs) stays for inspection
        METRICS.job_finished(outcome)
