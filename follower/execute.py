"""Run one attempt of a job: claim it, fetch the model, run every point, report each, close the attempt."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from common.jobs import Claim, FinishReport, JobTask, PointReport
from follower.leader_client import LeaderClient, LeaderRejected, StaleAttempt
from follower.model_cache import fetch_model
from follower.runner import run_backend
from follower.settings import FollowerSettings

log = logging.getLogger(__name__)


@dataclass
class AgentState:
    """What the agent is doing now; read by the heartbeat thread."""

    incarnation: str
    running_job: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def set_running(self, job_id: str | None) -> None:
        with self._lock:
            self.running_job = job_id

    def snapshot(self) -> str | None:
        with self._lock:
            return self.running_job


async def _run_points(task: JobTask, client: LeaderClient, settings: FollowerSettings, model_path: Path, env_base: dict) -> None:
    workdir = settings.jobs_dir / f"{task.job_id}-{task.attempt}"
    workdir.mkdir(parents=True, exist_ok=True)
    for backend in task.spec.backends:
        points = [p for p in task.points if p.backend == backend]
        async for result in run_backend(
            backend, points, model=task.model, model_path=model_path, workdir=workdir, env_base=env_base, slo=task.spec.slo
        ):
            p99 = f"{result.latency_ms.p99:.2f}" if result.latency_ms else "-"
            log.info(
                "job %s point %d: %d requests, p99 %s ms, valid=%s %s",
                task.job_id, result.point.index, result.requests, p99, result.valid, "; ".join(result.invalid_reasons),
            )
            report = PointReport(attempt=task.attempt, follower_id=settings.follower_id, result=result)
            # Reporting blocks on the network; the server is idle between points, so nothing is measured meanwhile.
            await asyncio.to_thread(client.report_point, task.job_id, report)


def execute(
    payload: dict, *, settings: FollowerSettings, client: LeaderClient, state: AgentState, env_base: dict
) -> str:
    """Run the attempt the payload names; returns its outcome (succeeded, failed or stale)."""
    task = JobTask.model_validate(payload)
    claim = Claim(attempt=task.attempt, follower_id=settings.follower_id, incarnation=state.incarnation)
    try:
        task = client.claim(task.job_id, claim)
    except (StaleAttempt, LeaderRejected) as exc:
        log.info("job %s attempt %d is no longer ours (%s); dropping the message", task.job_id, task.attempt, exc)
        return "stale"
    log.info("job %s attempt %d claimed: %d points", task.job_id, task.attempt, len(task.points))
    state.set_running(task.job_id)
    try:
        model_path, cached = fetch_model(client, task.model, settings.cache_dir)
        log.info("model %s %s", task.model.ref, "from cache" if cached else "downloaded")
        asyncio.run(_run_points(task, client, settings, model_path, env_base))
        done = FinishReport(attempt=task.attempt, follower_id=settings.follower_id, state="succeeded")
        client.finish(task.job_id, done)
        log.info("job %s attempt %d succeeded", task.job_id, task.attempt)
        return "succeeded"
    except StaleAttempt:
        log.info("job %s attempt %d was withdrawn by the leader (cancelled or requeued)", task.job_id, task.attempt)
        return "stale"
    except Exception as exc:  # the attempt fails with its reason; the agent lives on
        reason = f"{type(exc).__name__}: {exc}"
        log.exception("job %s attempt %d failed", task.job_id, task.attempt)
        failed = FinishReport(attempt=task.attempt, follower_id=settings.follower_id, state="failed", error=reason[:2000])
        with contextlib.suppress(StaleAttempt, LeaderRejected):
            client.finish(task.job_id, failed)
        return "failed"
    finally:
        state.set_running(None)  # the job's directory (server logs) stays for inspection
