"""Tier-1 placement: put each queued job on the capable follower whose queue finishes first, then dispatch it."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Literal

from motor.motor_asyncio import AsyncIOMotorDatabase

from common.jobs import JobTask
from leader.domain import Candidate, Load, Needs, QueuedJob
from leader.queue import TaskQueue
from leader.store import durations as durations_store
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store

log = logging.getLogger(__name__)

# How many queued jobs one tick considers; the rest wait for the next tick.
MAX_PER_TICK = 500
# After a failed publish, placement pauses (doubling up to this) so a broker outage does not churn jobs and history.
MAX_BROKER_BACKOFF_S = 30.0

Policy = Literal["queue_aware", "least_queue_length", "round_robin"]
POLICIES: tuple[str, ...] = ("queue_aware", "least_queue_length", "round_robin")
NO_FOLLOWER = "no follower is available (none registered, or all missing or draining)"
_ZERO = Load()


def unable_reason(job: QueuedJob | Needs, candidate: Candidate, backends: frozenset[str] = frozenset()) -> str | None:
    """Why this follower cannot run the job, or None if it can."""
    if isinstance(job, QueuedJob):
        backends, needs = job.backends, job.needs
    else:
        needs = job
    if not backends <= candidate.backends:
        return f"needs backends {', '.join(sorted(backends))}"
    if not needs.gpu and needs.gpu_model is None and needs.min_gpu_memory_mb is None:
        return None
    if not candidate.gpus:
        return "needs a GPU"
    gpus = candidate.gpus
    if needs.gpu_model is not None:
        gpus = tuple(g for g in gpus if needs.gpu_model.lower() in g.name.lower())
        if not gpus:
            return f"needs a GPU model matching {needs.gpu_model!r}"
    if needs.min_gpu_memory_mb is not None and not any(g.memory_mb >= needs.min_gpu_memory_mb for g in gpus):
        return f"needs a GPU with at least {needs.min_gpu_memory_mb} MiB"
    return None


def explain_unplaceable(job: QueuedJob, candidates: Iterable[Candidate]) -> str:
    """The stated reason a job stays queued: what it needs that no available follower offers."""
    reasons = sorted({unable_reason(job, c) or "" for c in candidates} - {""})
    if not reasons:
        return NO_FOLLOWER
    return f"waiting: {'; or '.join(reasons)}; no available follower has it"


class PlacementIndex:
    """One tick's in-memory view of the fleet: followers grouped by capability, a lazy heap of loads per group.

    A decision costs O(groups · log followers), not O(followers): with 1,000 followers in a few hardware
    classes it stays far below a millisecond (bench/scheduler.py measures it).
    """

    def __init__(
        self,
        candidates: Iterable[Candidate],
        loads: Mapping[str, Load],
        *,
        policy: Policy = "queue_aware",
        rr_last: str | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}")
        self.policy = policy
        self.loads = dict(loads)
        self.rr_last = rr_last
        groups: dict[tuple[frozenset[str], tuple], list[str]] = {}
        self.examples: list[Candidate] = []
        for cand in candidates:
            key = (cand.backends, cand.gpus)
            if key not in groups:
                groups[key] = []
                self.examples.append(cand)
            groups[key].append(cand.follower_id)
        self.groups = [sorted(ids) for ids in groups.values()]
        self.heaps = [sorted((self._key(fid), fid) for fid in ids) for ids in self.groups]
        self._eligible: dict[tuple[frozenset[str], Needs], list[int]] = {}

    def _key(self, fid: str) -> tuple[float, float]:
        load = self.loads.get(fid, _ZERO)
        # Queue-aware: the queue that finishes first; least-queue-length: the fewest jobs. Ties go to the other, then id.
        return (load.seconds, load.jobs) if self.policy == "queue_aware" else (load.jobs, load.seconds)

    def eligible_groups(self, job: QueuedJob) -> list[int]:
        """Indexes of the capability groups that can run the job (cached per kind of job)."""
        kind = (job.backends, job.needs)
        found = self._eligible.get(kind)
        if found is None:
            found = [i for i, example in enumerate(self.examples) if unable_reason(job, example) is None]
            self._eligible[kind] = found
        return found

    def _top(self, group: int) -> tuple[tuple[float, float], str]:
        heap = self.heaps[group]
        while True:
            key, fid = heap[0]
            current = self._key(fid)
            if current == key:
                return key, fid
            # Loads only grow within a tick, so a stale entry moves down; the heap stays a correct lower bound.
            heapq.heapreplace(heap, (current, fid))

    def choose(self, job: QueuedJob) -> str | None:
        """The follower the policy picks for the job, or None if no follower can run it."""
        groups = self.eligible_groups(job)
        if not groups:
            return None
        if self.policy == "round_robin":
            after: str | None = None
            first: str | None = None
            for g in groups:
                ids = self.groups[g]
                i = bisect.bisect_right(ids, self.rr_last) if self.rr_last is not None else 0
                if i < len(ids) and (after is None or ids[i] < after):
                    after = ids[i]
                if first is None or ids[0] < first:
                    first = ids[0]
            return after if after is not None else first
        best = min((self._top(g) for g in groups), key=lambda entry: (entry[0], entry[1]))
        return best[1]

    def add(self, follower_id: str, estimate_s: float) -> None:
        """Account a job just placed on the follower."""
        self.loads[follower_id] = self.loads.get(follower_id, _ZERO).plus(estimate_s)
        self.rr_last = follower_id


def choose_follower(
    *, job: QueuedJob, candidates: Iterable[Candidate], loads: Mapping[str, Load], policy: Policy = "queue_aware"
) -> str | None:
    """The capable follower the policy picks (queue-aware: least queued work, then fewest jobs, then id), or None."""
    return PlacementIndex(candidates, loads, policy=policy).choose(job)


class Placer:
    """The placement loop: runs every interval, or at once when nudged by a submission or a requeue."""

    def __init__(self, *, db: AsyncIOMotorDatabase, queue: TaskQueue, interval_s: float, policy: Policy = "queue_aware") -> None:
        self._db = db
        self.policy = policy
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
        loads = await jobs_store.active_loads(self._db)
        # The round-robin cursor lives in PerfDB, so a restarted leader goes on where it stopped.
        rr_last = await jobs_store.get_cursor(self._db) if self.policy == "round_robin" else None
        index = PlacementIndex(candidates, loads, policy=self.policy, rr_last=rr_last)
        factors: dict[tuple[str, str, str], float] = {}
        try:
            for job in queued:
                follower_id = index.choose(job)
                if follower_id is None:
                    reason = explain_unplaceable(job, candidates)
                    if reason != job.waiting_reason:
                        await jobs_store.set_waiting_reason(self._db, job_id=job.job_id, attempt=job.attempt, reason=reason)
                    continue  # no capable follower now: the job stays queued, with the reason in its view
                task = await jobs_store.assign_job(self._db, job_id=job.job_id, attempt=job.attempt, follower_id=follower_id)
                if task is None:
                    continue  # cancelled or changed since the scan
                key = (task.model.ref, ",".join(task.spec.backends), follower_id)
                if key not in factors:
                    factors[key] = await durations_store.factor(self._db, model_ref=key[0], backends=key[1], follower_id=key[2])
                if factors[key] != 1.0:
                    # History of this model/backend on this follower corrects the spec-based estimate.
                    task = task.model_copy(update={"estimate_s": round(job.estimate_s * factors[key], 3)})
                    await jobs_store.set_estimate(self._db, job_id=job.job_id, attempt=job.attempt, estimate_s=task.estimate_s)
                index.add(follower_id, task.estimate_s)
                if not await self._dispatch(task, follower_id):
                    return sent  # the broker is down: the other jobs wait too
                sent += 1
        finally:
            if self.policy == "round_robin" and index.rr_last != rr_last and index.rr_last is not None:
                await jobs_store.set_cursor(self._db, index.rr_last)
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
