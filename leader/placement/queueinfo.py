"""A waiting job's queue position and estimated start, from the placer's book and its follower's last heartbeat.

- Assigned to a follower: its place in that follower's run order (SJF with ageing, as the heartbeat reports it;
  by estimate, shortest first, for a job the follower has not reported yet), and it starts when the running job's
  remaining estimate and the estimates of the jobs ahead have passed.
- Queued at the leader: its place in the order placement takes the leader's queue in (the fair order of
  common/fairshare.py when followers hold few jobs, `placement_lookahead`; else first come first served); its start is
  what placement would make of it: the jobs ahead (of the same kind) go one by one to the capable follower whose queue
  finishes first, then this one does. An estimate, not a promise: a shorter job submitted later, a team's changing
  use or the followers' own order may still let another job pass.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from pymongo.asynchronous.database import AsyncDatabase

from common.spec.grid import overload_allowance_s
from common.wire.followers import HeldJob
from common.wire.jobs import JobState, JobView, SubmitPreview
from common.wire.models import ModelMeta
from leader.clock import utcnow
from leader.domain import Candidate, Load, QueuedJob
from leader.jobplan import JobPlan
from leader.placement.book import JobBook
from leader.placement.placer import Placer, Policy, choose_follower, explain_unplaceable, unable_reason
from leader.store import assignments as assignments_store
from leader.store import followers as followers_store
from leader.store.jobdocs import queued_job


def _at(seconds: float, now: datetime) -> datetime:
    return now + timedelta(seconds=max(0.0, seconds))


async def _running_remaining_s(db: AsyncDatabase, follower_id: str, now: datetime) -> float:
    """What is left of the estimate of the job running on the follower (0 if none, or if it overran)."""
    view = await assignments_store.running_on(db, follower_id=follower_id)
    if view is None:
        return 0.0
    started = view.started_at()
    elapsed = (now - started).total_seconds() if started else 0.0
    return max(0.0, view.estimate_s - elapsed)


@dataclass(frozen=True)
class _Table:
    """Every job of the leader's queue in the order placement takes it, its place in it and seconds from `made` to its
    estimated start (None: no follower can run it), as of one state of the book, the teams' settings and the fleet."""

    settings: int  # the teams' settings' generation (Sharing.generation)
    fleet: tuple[Candidate, ...]
    made: float  # this module's clock
    places: dict[str, tuple[int, float | None]]


# A table is kept while the teams' settings and the fleet are unchanged, at most TABLE_TTL_S: it is an estimate of at
# most that age (waiting ages jobs in the fair order, a placement moves a team's standing and the jobs behind it, a job
# enters the queue: it has no place until the next table). Made at most once per TABLE_TTL_S however often the book
# changes (a fleet whose followers lose or reject jobs changes it several times a second).
TABLE_TTL_S = 1.0
_clock = time.monotonic  # (a seam for tests)


class QueueInfo:
    """Fills waiting jobs' queue position and estimated start. The leader's queue is ordered once for every job in it,
    placement simulated along that order (O(n log f)), and the table shared by every request (one made at a time) for
    at most TABLE_TTL_S, so a room of open Jobs pages costs one ordering a second, not one per page, per job or per
    placement; the followers' queues are read once per instance (one request)."""

    _tables: ClassVar[weakref.WeakKeyDictionary[JobBook, _Table]] = weakref.WeakKeyDictionary()
    _making: ClassVar[weakref.WeakKeyDictionary[JobBook, asyncio.Future[_Table]]] = weakref.WeakKeyDictionary()

    def __init__(self, db: AsyncDatabase, placer: Placer) -> None:
        self._db, self._placer = db, placer
        self._candidates: list[Candidate] | None = None
        self._followers: dict[str, list[HeldJob]] = {}
        self._remaining: dict[str, float] = {}
        self._table_seen: _Table | None = None  # the table this instance (one request) reads every job's place in

    async def _fleet(self) -> list[Candidate]:
        """The fleet as the placer's last tick with queued jobs saw it (the queue is placed on that), else read."""
        if self._candidates is None:
            seen = self._placer.candidates
            self._candidates = seen if seen is not None else await followers_store.candidates(self._db)
        return self._candidates

    def _current(self, table: _Table, fleet: tuple[Candidate, ...]) -> bool:
        fresh = _clock() - table.made < TABLE_TTL_S
        return fresh and (table.settings, table.fleet) == (self._placer.sharing.generation, fleet)

    async def _table(self, book: JobBook) -> _Table:
        """The table this request reads: the kept one if current, else the one being made if current, else a new one."""
        if self._table_seen is not None:
            return self._table_seen
        fleet = tuple(await self._fleet())
        table = self._tables.get(book)
        if table is None or not self._current(table, fleet):
            making = self._making.get(book)
            table = await asyncio.shield(making) if making is not None else None
            if table is None or not self._current(table, fleet):
                table = await self._make(book, fleet)
        self._table_seen = table
        return table

    async def _make(self, book: JobBook, fleet: tuple[Candidate, ...]) -> _Table:
        future: asyncio.Future[_Table] = asyncio.get_running_loop().create_future()
        self._making[book] = future
        try:
            settings = self._placer.sharing.generation  # (what the order is made of: read before it awaits)
            table = self._tables[book] = self._simulate(book, await self._order(book, fleet), settings, fleet)
            future.set_result(table)
            return table
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # (retrieved: an error reaches every waiter, never the loop's handler)
            raise
        finally:
            if self._making.get(book) is future:
                del self._making[book]

    async def _order(
        self, book: JobBook, fleet: tuple[Candidate, ...]
    ) -> tuple[list[tuple[str, int, float]], list[tuple[str, ...]]]:
        """The queue's order, each job as (id, kind, estimate), and each kind's capable followers (a kind is an index
        into them; each job's kind as the book's index of them, by number: a kind's key hashes its needs field by
        field)."""
        # Read before any await: the placer's tick changes the book meanwhile.
        jobs = [job for _, job, _ in book.queue_order()]
        kinds = list(book.kinds.values())
        kind_of = {job_id: i for i, queue in enumerate(kinds) for job_id in queue.members}
        if self._placer.lookahead is not None:
            jobs = await self._placer.sharing.order(jobs, book, len(fleet))
        capable: dict[int, tuple[str, ...]] = {}
        for job in jobs:
            if kind_of[job.job_id] not in capable:
                capable[kind_of[job.job_id]] = tuple(c.follower_id for c in fleet if unable_reason(job, c) is None)
        kind_numbers = {kind: n for n, kind in enumerate(capable)}  # (the kinds this order holds, numbered from 0)
        ordered = [(job.job_id, kind_numbers[kind_of[job.job_id]], job.estimate_s) for job in jobs]
        return ordered, list(capable.values())

    def _simulate(
        self,
        book: JobBook,
        order: tuple[list[tuple[str, int, float]], list[tuple[str, ...]]],
        settings: int,
        fleet: tuple[Candidate, ...],
    ) -> _Table:
        """Placement's simulation along the order, of the book as it is (no await: one state of it): the jobs ahead of
        the same kind go one by one to the capable follower whose queue finishes first; a job starts when the first of
        them is free."""
        jobs, capable = order
        queued, loads = book.queued, book.loads
        heaps: dict[int, list[float] | None] = {}
        places: dict[str, tuple[int, float | None]] = {}
        for job_id, kind, estimate_s in jobs:
            if job_id not in queued:
                continue  # left the queue while the order was made
            if kind not in heaps:
                heaps[kind] = sorted(loads[f].seconds if f in loads else 0.0 for f in capable[kind]) or None
            heap = heaps[kind]
            if heap is None:
                places[job_id] = (len(places) + 1, None)  # no start to estimate: waiting_reason says why
                continue
            places[job_id] = (len(places) + 1, heap[0])
            heapq.heapreplace(heap, heap[0] + estimate_s)
        return _Table(settings, fleet, _clock(), places)

    async def _assigned(self, book: JobBook, view: JobView, now: datetime) -> JobView:
        fid = view.follower_id or ""
        if fid not in self._followers:
            follower = await followers_store.get_follower(self._db, follower_id=fid)
            self._followers[fid] = [h for h in (follower.held if follower is not None else []) if not h.running]
            self._remaining[fid] = await _running_remaining_s(self._db, fid, now)
        held = self._followers[fid]
        order = [h.job_id for h in held]
        if view.id in order:
            ahead = [h.estimate_s for h in held[: order.index(view.id)]]
        else:
            # Not in the last heartbeat yet: the follower will slot it in by estimate (exact SJF, ageing aside).
            mine = [
                a.estimate_s
                for job_id, a in book.active.items()
                if a.follower_id == fid and a.state == JobState.assigned and job_id != view.id
            ]
            ahead = [e for e in mine if e < view.estimate_s]
        start = self._remaining[fid] + sum(ahead)
        return view.model_copy(update={"queue_position": len(ahead) + 1, "estimated_start": _at(start, now)})

    async def _queued(self, book: JobBook, view: JobView, now: datetime) -> JobView:
        if view.id not in book.queued:
            return view  # the book has not seen it yet (submitted a moment ago): the next read has it
        table = await self._table(book)
        place = table.places.get(view.id)
        if place is None:
            return view  # queued since the table was made (at most TABLE_TTL_S ago): the next one has its place
        position, start = place
        if start is None:
            return view.model_copy(update={"queue_position": position})
        age = _clock() - table.made
        return view.model_copy(update={"queue_position": position, "estimated_start": _at(start - age, now)})

    async def fill(self, view: JobView) -> JobView:
        """The view with queue_position and estimated_start filled for a queued or assigned job (else unchanged)."""
        book = self._placer.book
        if book is None:
            return view  # the placer has not loaded its book yet (the leader just started)
        now = utcnow()
        if view.state == JobState.assigned and view.follower_id:
            return await self._assigned(book, view, now)
        if view.state == JobState.queued:
            return await self._queued(book, view, now)
        return view


def _as_queued(plan: JobPlan, model: ModelMeta) -> QueuedJob:
    """A checked submission as the placer's book would hold it once stored."""
    spec = plan.spec
    doc = {"_id": "", "attempt": 1, "spec": spec.model_dump(mode="json"), "model": model.model_dump(), "model_ref": model.ref}
    return queued_job({**doc, "base_estimate_s": plan.estimate_s, "measured_s": plan.measured_s})


def unplaceable(candidates: list[Candidate], *, plan: JobPlan, model: ModelMeta, policy: Policy) -> str | None:
    """Why none of `candidates` (the fleet: Placer.fleet) can run this submission, whatever it waits behind (a backend
    none offers, a GPU none has, every follower draining); None when one can."""
    job = _as_queued(plan, model)
    if choose_follower(job=job, candidates=candidates, loads={}, policy=policy) is not None:
        return None
    return explain_unplaceable(job, candidates)


def preview(
    candidates: list[Candidate], book: JobBook | None, *, plan: JobPlan, model: ModelMeta, policy: Policy
) -> SubmitPreview:
    """What placement would do with a checked submission if it were stored now: the jobs queued at the leader for the
    same kind of follower go first, one by one, to the follower the policy picks; then this one does. Its start is the
    work queued there by then. An estimate, as `QueueInfo.fill`'s is; a split job is previewed as its first part."""
    spec = plan.spec
    points = len(plan.points)
    out = SubmitPreview(
        name=spec.name,
        model_ref=model.ref,
        points=points,
        jobs=plan.jobs_created,
        estimate_s=round(plan.estimate_s, 3),
        estimate_max_s=round(plan.estimate_s + overload_allowance_s(spec, points), 3),
    )
    job = _as_queued(plan, model)
    loads = dict(book.loads) if book is not None else {}
    queued = sorted(book.queued.values(), key=lambda entry: entry[0]) if book is not None else []
    for _, other, _ in queued:
        if (other.backends, other.needs) == (job.backends, job.needs):
            target = choose_follower(job=other, candidates=candidates, loads=loads, policy=policy)
            if target is not None:
                loads[target] = loads.get(target, Load()).plus(other.estimate_s)
    chosen = choose_follower(job=job, candidates=candidates, loads=loads, policy=policy)
    if chosen is None:
        return out.model_copy(update={"waiting_reason": explain_unplaceable(job, candidates)})
    there = loads.get(chosen, Load())
    return out.model_copy(update={"follower_id": chosen, "jobs_ahead": there.jobs, "start_in_s": round(there.seconds, 1)})
