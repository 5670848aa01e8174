"""Tier-1 placement: put each queued job on the capable follower whose queue finishes first, then dispatch it."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import heapq
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Literal

from pymongo.asynchronous.database import AsyncDatabase

from common import tracing
from common.fairshare import AGEING_PER_S, WAIT_BOUND
from common.spec.needs import TRUSTED_ONLY
from common.spec.network import NETEM, TBF
from common.wire.jobs import JobTask
from leader.clock import FEED_OVERLAP, Ages, WallSteps, utcnow
from leader.domain import Candidate, Load, Needs, QueuedJob
from leader.placement.book import JobBook
from leader.placement.queue import TaskQueue
from leader.placement.sharing import QuotaBlock, Sharing
from leader.store import assignments as assignments_store
from leader.store import durations as durations_store
from leader.store import followers as followers_store

log = logging.getLogger(__name__)

# How many queued jobs one tick considers; the rest wait for the next tick.
MAX_PER_TICK = 500
# The change feed re-reads this much before the newest change seen: a write stamped just before a read may commit after it.
# A full reload of the book from PerfDB this often: a safety net for a change the feed could have missed.
FULL_RESYNC_S = 600.0
# After a failed publish, placement pauses (doubling up to this) so a broker outage does not churn jobs and history.
MAX_BROKER_BACKOFF_S = 30.0
# A submission's "can any follower run it" check reads the fleet at most this often (once per submission, it was a read
# of every follower's document: PerfDB's largest cost in a storm of submissions), and at once after this leader
# registered, approved or resumed a follower or heard a missing one again (Placer.fleet_changed); placement's own ticks
# always read it afresh.
FLEET_TTL_S = 1.0
_clock = time.monotonic  # (a seam for tests)

Policy = Literal["queue_aware", "least_queue_length", "round_robin"]
POLICIES: tuple[str, ...] = ("queue_aware", "least_queue_length", "round_robin")
NO_FOLLOWER = "no follower is available (none registered, or all missing, draining or awaiting an admin's approval)"
_ZERO = Load()


def unable_reason(job: QueuedJob | Needs, candidate: Candidate, backends: frozenset[str] = frozenset()) -> str | None:
    """Why this follower cannot run the job, or None if it can."""
    if isinstance(job, QueuedJob):
        backends, needs = job.backends, job.needs
    else:
        needs = job
    if needs.follower is not None and candidate.follower_id != needs.follower:
        return f"is pinned to follower {needs.follower}"
    if needs.labels and not set(needs.labels) <= set(candidate.labels):
        return f"needs a follower labelled {', '.join(f'{k}={v}' for k, v in needs.labels)}"
    if not backends <= candidate.backends:
        missing = backends - candidate.backends
        shaping = missing & {NETEM, TBF}
        if shaping == missing:
            what = " and ".join(("delay, jitter or loss (netem)",) * (NETEM in shaping) + ("a rate (tbf)",) * (TBF in shaping))
            return f"needs a follower that can shape its servers' links with {what}"
        unsandboxed = sorted(b for b in missing if f"{b}{TRUSTED_ONLY}" in candidate.backends)
        if unsandboxed and len(unsandboxed) == len(missing):
            return (
                f"needs a follower that sandboxes {', '.join(unsandboxed)} (the model's code runs in its server), "
                "or the model marked trusted by an admin"
            )
        return f"needs backends {', '.join(sorted(b.removesuffix(TRUSTED_ONLY) for b in backends - {NETEM, TBF}))}"
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
        max_jobs: int | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}")
        self.policy = policy
        self.max_jobs = max_jobs  # a follower holding this many jobs (running and waiting) takes no more: None, no limit
        self.loads = dict(loads)
        self.rr_last = rr_last
        groups: dict[tuple[frozenset[str], tuple, tuple], list[str]] = {}
        self.examples: list[Candidate] = []
        for cand in candidates:
            key = (cand.backends, cand.gpus, cand.labels)
            if key not in groups:
                groups[key] = []
                self.examples.append(cand)
            groups[key].append(cand.follower_id)
        self.groups = [sorted(ids) for ids in groups.values()]
        self.group_of = {fid: g for g, ids in enumerate(self.groups) for fid in ids}
        self.heaps = [sorted((self._key(fid), fid) for fid in ids) for ids in self.groups]
        self.with_room = sum(not self.full(fid) for fid in self.group_of)  # followers that may take another job
        self._eligible: dict[tuple[frozenset[str], Needs], list[int]] = {}

    def full(self, fid: str) -> bool:
        """Whether the follower holds all the jobs it may."""
        return self.max_jobs is not None and self.loads.get(fid, _ZERO).jobs >= self.max_jobs

    def _key(self, fid: str) -> tuple[float, float]:
        load = self.loads.get(fid, _ZERO)
        if self.full(fid):
            return (math.inf, math.inf)
        # Queue-aware: the queue that finishes first; least-queue-length: the fewest jobs. Ties go to the other, then id.
        return (load.seconds, load.jobs) if self.policy == "queue_aware" else (load.jobs, load.seconds)

    def eligible_groups(self, job: QueuedJob) -> list[int]:
        """Indexes of the capability groups that can run the job (cached per kind of job)."""
        needs = dataclasses.replace(job.needs, follower=None)  # a group's example stands for its followers, pin aside
        kind = (job.backends, needs)
        found = self._eligible.get(kind)
        if found is None:
            found = [i for i, example in enumerate(self.examples) if unable_reason(needs, example, job.backends) is None]
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

    def choose(
        self, job: QueuedJob, *, same_class_as: str | None = None, blocked: Callable[[Candidate], bool] | None = None
    ) -> str | None:
        """The follower the policy picks for the job, or None if no follower can run it.

        `same_class_as`: a follower holding another part of the same split job; the choice is kept to followers with
        its GPUs (the hardware class), so the merged result compares like with like. If none of them is available
        any more, any capable follower will do, rather than leave the part waiting for ever.
        """
        groups = self.eligible_groups(job)
        if blocked is not None:  # followers the job may not take now (its team's quota on their class is used up)
            groups = [g for g in groups if not blocked(self.examples[g])]
        if not groups:
            return None
        pinned = job.needs.follower
        if pinned is not None:  # that follower, if it is available, capable and has room; else the job waits for it
            return pinned if self.group_of.get(pinned) in groups and not self.full(pinned) else None
        if same_class_as is not None and same_class_as in self.group_of:
            gpus = self.examples[self.group_of[same_class_as]].gpus
            groups = [g for g in groups if self.examples[g].gpus == gpus] or groups
        if self.policy == "round_robin":
            after: str | None = None
            first: str | None = None
            for g in groups:
                ids = [fid for fid in self.groups[g] if not self.full(fid)] if self.max_jobs is not None else self.groups[g]
                if not ids:
                    continue
                i = bisect.bisect_right(ids, self.rr_last) if self.rr_last is not None else 0
                if i < len(ids) and (after is None or ids[i] < after):
                    after = ids[i]
                if first is None or ids[0] < first:
                    first = ids[0]
            return after if after is not None else first
        best = min((self._top(g) for g in groups), key=lambda entry: (entry[0], entry[1]))
        return None if math.isinf(best[0][0]) else best[1]

    def add(self, follower_id: str, estimate_s: float) -> None:
        """Account a job just placed on the follower."""
        had_room = follower_id in self.group_of and not self.full(follower_id)
        self.loads[follower_id] = self.loads.get(follower_id, _ZERO).plus(estimate_s)
        self.with_room -= had_room and self.full(follower_id)
        self.rr_last = follower_id


def choose_follower(
    *, job: QueuedJob, candidates: Iterable[Candidate], loads: Mapping[str, Load], policy: Policy = "queue_aware"
) -> str | None:
    """The capable follower the policy picks (queue-aware: least queued work, then fewest jobs, then id), or None."""
    return PlacementIndex(candidates, loads, policy=policy).choose(job)


class Placer:
    """The placement loop: runs every interval, or at once when nudged by a submission or a requeue.

    Its view of the queue and the loads is the JobBook, kept current from PerfDB by a change feed, so a tick costs
    Mongo work in proportion to what changed and what it places, not to how many jobs the fleet holds.
    """

    def __init__(
        self,
        *,
        db: AsyncDatabase,
        queue: TaskQueue,
        interval_s: float,
        policy: Policy = "queue_aware",
        resync_s: float = FULL_RESYNC_S,
        lookahead: int | None = None,
        ageing_per_s: float = AGEING_PER_S,
        wait_bound: float = WAIT_BOUND,
    ) -> None:
        self._db = db
        self.policy = policy
        # None: every job goes to a follower at once (the two-tier scheduler: each follower orders what it holds). N: a
        # follower holds at most N jobs waiting beside the one it runs, the rest wait here, in the fair order.
        self.lookahead = lookahead
        self.sharing = Sharing(db, ageing_per_s=ageing_per_s, wait_bound=wait_bound)
        self._queue = queue
        self._interval_s = interval_s
        self._resync_s = resync_s
        self._wakeup = asyncio.Event()
        self._backoff_s = 0.0
        self._paused_until = 0.0
        self.book: JobBook | None = None  # None until the first full load from PerfDB
        # The followers that may take work, as the last tick that had jobs to place read them (None before).
        self.candidates: list[Candidate] | None = None
        self._fleet: tuple[float, list[Candidate]] | None = None  # (monotonic read time, candidates): Placer.fleet
        self._fleet_changes = 0  # (a read that began before a change is not kept)
        self._loaded_at = 0.0
        self._since: datetime | None = None
        self._steps = WallSteps()
        self.sent = Ages()  # monotonic age of each (job, attempt) sent to a follower: lost messages are judged by it
        self.last_tick: dict[str, float] = {}  # what the last tick cost (ms per part, counts): for the bench and logs

    def nudge(self) -> None:
        """Run the next tick now rather than at the end of the interval."""
        self._wakeup.set()

    def fleet_changed(self) -> None:
        """A follower may take work that could not (registered, approved, resumed, heard again): read the fleet
        afresh, and tick."""
        self._fleet = None
        self._fleet_changes += 1
        self.nudge()

    async def fleet(self) -> list[Candidate]:
        """The followers that may take work, read from PerfDB at most every FLEET_TTL_S (see there)."""
        now, changes = _clock(), self._fleet_changes
        if self._fleet is not None and now - self._fleet[0] < FLEET_TTL_S:
            return self._fleet[1]
        read = await followers_store.candidates(self._db)
        if changes == self._fleet_changes:  # (else a change landed while it read: the next call reads again)
            self._fleet = (now, read)
        return read

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

    async def sync(self) -> JobBook:
        """Bring the book up to date: a full load at first (and every resync interval), else the change feed."""
        started = utcnow()
        stepped_s = self._steps.stepped_s()
        if stepped_s:
            # The feed reads by `updated_at`: after a step back, new writes sort before what was seen. Read it all again.
            log.warning("the wall clock stepped %+.1fs: the job book is read again in full", stepped_s)
        if self.book is None or stepped_s or time.monotonic() - self._loaded_at >= self._resync_s:
            book = JobBook()
            book.apply_all(await assignments_store.unfinished_jobs(self._db))
            self.book, self._loaded_at = book, time.monotonic()
            # Changes that land while the full load reads are caught by the feed from the load's start.
            self._since = started
            return book
        changes = await assignments_store.changed_since(self._db, since=(self._since or started) - FEED_OVERLAP)
        self.book.apply_all(changes)
        self._since = started  # (read again from FEED_OVERLAP before it: leader.clock says why)
        return self.book

    async def tick(self) -> int:
        """Re-send undispatched assignments, then place queued jobs; returns how many jobs were dispatched."""
        sent = 0
        if time.monotonic() < self._paused_until:
            return sent
        t0 = time.perf_counter()
        book = await self.sync()
        cost = {"sync_ms": (time.perf_counter() - t0) * 1e3, "placed": 0.0, "queued": float(len(book.queued))}
        self.last_tick = cost
        # An assignment whose message may not have been sent: the leader stopped between the two writes.
        for job_id in book.undispatched():
            found = await assignments_store.assigned_task(self._db, job_id=job_id)
            if found is None:
                book.dispatched(job_id)  # sent after all (the follower claimed it) or moved on: the feed has the rest
                continue
            if not await self._dispatch(found[1], found[0]):
                return sent
            sent += 1
        kinds = book.waiting_kinds()
        if not kinds:
            return sent
        t0 = time.perf_counter()
        candidates = self.candidates = await followers_store.candidates(self._db)
        cost["candidates_ms"] = (time.perf_counter() - t0) * 1e3
        # The round-robin cursor lives in PerfDB, so a restarted leader goes on where it stopped.
        rr_last = await assignments_store.get_cursor(self._db) if self.policy == "round_robin" else None
        max_jobs = None if self.lookahead is None else 1 + self.lookahead
        index = PlacementIndex(candidates, book.loads, policy=self.policy, rr_last=rr_last, max_jobs=max_jobs)
        batch: list[QueuedJob] = []
        for kind in kinds:
            probe = QueuedJob("", 0, kind[0], 0.0, kind[1])
            if index.eligible_groups(probe):
                batch.extend(book.oldest(kind, MAX_PER_TICK))
                continue
            # No capable follower now: the kind's jobs stay queued, with the reason in their view (written once).
            reason = explain_unplaceable(probe, candidates)
            ids = book.to_state(kind, reason, MAX_PER_TICK)
            if ids:
                await assignments_store.set_waiting_reasons(self._db, job_ids=ids, reason=reason)
                book.stated(kind, reason, ids)
        order = {job_id: book.queued[job_id][0] for job_id in (j.job_id for j in batch)}
        batch.sort(key=lambda j: order[j.job_id])
        contending = self.lookahead is not None and len(book.teams()) > 1
        if self.lookahead is not None:
            batch = await self.sharing.order(batch, book, len(candidates))
        corrections: dict[tuple[str, str, str], durations_store.Correction] = {}
        classes = {c.follower_id: c.follower_class for c in candidates}
        quotas: dict[str, QuotaBlock | None] = {}
        t0 = time.perf_counter()
        decide_s = 0.0
        try:
            for job in batch[:MAX_PER_TICK]:
                if index.with_room <= 0:
                    break  # every follower holds what it may: the rest wait here, in order
                d0 = time.perf_counter()
                sibling = book.sibling_follower(job.part_of)
                if job.team not in quotas:  # once per team and tick
                    quotas[job.team] = await self.sharing.quota_block(job.team)
                quota = quotas[job.team]
                follower_id = index.choose(job, same_class_as=sibling, blocked=quota[0] if quota else None)
                decide_s += time.perf_counter() - d0
                if follower_id is None:
                    # Placeable but for its team's quota: it waits, saying so (written once per new reason).
                    waits = quota[1]() if quota is not None and index.choose(job, same_class_as=sibling) else None
                    if waits is not None and waits != job.waiting_reason:
                        await assignments_store.set_waiting_reasons(self._db, job_ids=[job.job_id], reason=waits)
                    continue
                key = (job.model_ref, durations_store.backends_key(job.backends), follower_id)
                if key not in corrections:
                    corrections[key] = await durations_store.correction(
                        self._db, model_ref=key[0], backends=key[1], follower_id=key[2], follower_class=classes.get(follower_id)
                    )
                # History of this model/backend on this follower (else its class, else the fleet) corrects the spec's
                # estimate: fixed cost + rate × load seconds, so short jobs' history does not shrink long jobs' estimates
                # (leader/store/durations.py).
                estimate_s = corrections[key].estimate(job.estimate_s, job.measured())
                task = await assignments_store.assign_job(
                    self._db,
                    job_id=job.job_id,
                    attempt=job.attempt,
                    follower_id=follower_id,
                    estimate_s=estimate_s,
                    spread_s=corrections[key].spread_s,
                )
                if task is None:
                    continue  # cancelled or changed since the feed read it: the next feed says what it is now
                # A job an idle follower starts at once changes its team's standing (common/fairshare.py): with teams
                # contending, the order is made again before the next placement, at a tick that follows at once.
                reorder = contending and book.runs_nothing(follower_id)
                book.placed(job, follower_id, task.estimate_s)
                index.add(follower_id, task.estimate_s)
                cost["placed"] += 1
                if not await self._dispatch(task, follower_id):
                    return sent  # the broker is down: the other jobs wait too
                sent += 1
                if reorder:
                    self._wakeup.set()
                    break
        finally:
            book.restore(batch)
            cost["place_ms"] = (time.perf_counter() - t0) * 1e3
            cost["decide_ms"] = decide_s * 1e3
            if self.policy == "round_robin" and index.rr_last != rr_last and index.rr_last is not None:
                await assignments_store.set_cursor(self._db, index.rr_last)
        return sent

    async def _dispatch(self, task: JobTask, follower_id: str) -> bool:
        placed: tracing.Attributes = {
            "benchfleet.job_id": task.job_id,
            "benchfleet.attempt": task.attempt,
            "benchfleet.follower_id": follower_id,
        }
        try:
            with tracing.span("job.place", parent=task.traceparent, attributes=placed):
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
            await assignments_store.unassign_job(
                self._db, job_id=task.job_id, attempt=task.attempt, reason=f"dispatch failed: {exc}"
            )
            return False
        self._backoff_s = 0.0
        self.sent.mark((task.job_id, task.attempt))
        await assignments_store.mark_dispatched(self._db, job_id=task.job_id, attempt=task.attempt)
        if self.book is not None:
            self.book.dispatched(task.job_id)
        log.info("job %s attempt %d sent to follower %s", task.job_id, task.attempt, follower_id)
        return True
