"""Tier-1 placement: put each queued job on the capable follower whose queue finishes first, then dispatch it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping

from motor.motor_asyncio import AsyncIOMotorDatabase

from common.jobs import JobTask
from leader.domain import Candidate, Load, QueuedJob
from leader.queue import TaskQueue
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store

log = logging.getLogger(__name__)

# How many queued jobs one tick considers; the rest wait for the next tick.
MAX_PER_TICK = 500
# After a failed publish, placement pauses (doubling up to this) so a broker outage does not churn jobs and history.
MAX_BROKER_BACKOFF_S = 30.0


def choose_follower(*, job: QueuedJob, candidates: Iterable[Candidate], loads: Mapping[str, Load]) -> str | None:
    """The capable follower with the least queued work (estimate seconds), then fewest jobs, then id; None if none can run it."""
    best: tuple[float, int, str] | None = None
    for candidate in candidates:
        if not job.backends <= candidate.backends:
            continue
        load = loads.get(candidate.follower_id, Load())
        key = (load.seconds, load.jobs, candidate.follower_id)
        if best is None or key < best:
            best = key
    return best[2] if best is not None else None


class Placer:
    """The placement loop: runs every interval, or at once when nudged by a submission or a requeue."""

    def __init__(self, *, db: AsyncIOMotorDatabase, queue: TaskQueue, interval_s: float) -> None:
        self._db = db
        self._queue = queue
        self._interval_s = interval_s
        self._wakeup = asyncio.Event()
        self._backoff_s = 0.0
        self._paused_until = 0.0

    def nudge(self) -> None:
        """Run the next tick now rather than at the end of the interval."""
        self._wakeup.set()

    async def run(self) -> None:
        """Tick forever; an error in one tick is logged and the next tick tries again."""
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("placement tick failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=self._interval_s)
            # Cleared before the tick, so a nudge that arrives during it is not lost.
            self._wakeup.clear()

    async def tick(self) -> int:
        """Re-send undispatched assignments, then place queued jobs; returns how many jobs were dispatched."""
        sent = 0
        if time.monotonic() < self._paused_until:
            return sent
        # An assignment whose message may not have been sent: the leader stopped between the two writes.
        for follower_id, task in await jobs_store.undispatched_jobs(self._db):
            if not await self._dispatch(task, follower_id):
                return sent
            sent += 1
        queued = await jobs_store.queued_jobs(self._db, limit=MAX_PER_TICK)
        if not queued:
            return sent
        candidates = await followers_store.candidates(self._db)
        if not candidates:
            return sent
        loads = await jobs_store.active_loads(self._db)
        for job in queued:
            follower_id = choose_follower(job=job, candidates=candidates, loads=loads)
            if follower_id is None:
                continue  # no capable follower now: the job stays queued
            task = await jobs_store.assign_job(self._db, job_id=job.job_id, attempt=job.attempt, follower_id=follower_id)
            if task is None:
                continue  # cancelled or changed since the scan
            loads = {**loads, follower_id: loads.get(follower_id, Load()).plus(job.estimate_s)}
            if not await self._dispatch(task, follower_id):
                return sent  # the broker is down: the other jobs wait too
            sent += 1
        return sent

    async def _dispatch(self, task: JobTask, follower_id: str) -> bool:
        try:
            await self._queue.send_job(task, follower_id=follower_id)
        except Exception as exc:
            self._backoff_s = min(MAX_BROKER_BACKOFF_S, max(self._interval_s, 2 * self._backoff_s))
            self._paused_until = time.monotonic() + self._backoff_s
            log.warning(
                "could not send job %s to follower %s (%s); back to the queue, placement paused %.1fs",
                task.job_id,
                follower_id,
                exc,
                self._backoff_s,
            )
            await jobs_store.unassign_job(self._db, job_id=task.job_id, attempt=task.attempt, reason=f"dispatch failed: {exc}")
            return False
        self._backoff_s = 0.0
        await jobs_store.mark_dispatched(self._db, job_id=task.job_id, attempt=task.attempt)
        log.info("job %s attempt %d sent to follower %s", task.job_id, task.attempt, follower_id)
        return True
