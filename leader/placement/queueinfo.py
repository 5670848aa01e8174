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

import heapq
from datetime import datetime, timedelta

from pymongo.asynchronous.database import AsyncDatabase

from common.spec.grid import overload_allowance_s
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


async def _assigned(db: AsyncDatabase, book: JobBook, view: JobView, now: datetime) -> JobView:
    fid = view.follower_id or ""
    follower = await followers_store.get_follower(db, follower_id=fid)
    held = [h for h in (follower.held if follower is not None else []) if not h.running]
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
    remaining = await _running_remaining_s(db, fid, now)
    return view.model_copy(update={"queue_position": len(ahead) + 1, "estimated_start": _at(remaining + sum(ahead), now)})


class QueueInfo:
    """Fills waiting jobs' queue position and estimated start; the fleet and the queue's order are read once per
    instance (one request), so a page of jobs costs one ordering of the queue, not one per job."""

    def __init__(self, db: AsyncDatabase, placer: Placer) -> None:
        self._db, self._placer = db, placer
        self._candidates: list[Candidate] | None = None
        self._order: dict[str, int] | None = None
        self._jobs: list[QueuedJob] = []

    async def _fleet(self) -> list[Candidate]:
        if self._candidates is None:
            self._candidates = await followers_store.candidates(self._db)
        return self._candidates

    async def _ordered(self, book: JobBook) -> tuple[list[QueuedJob], dict[str, int]]:
        """The leader's queue in the order placement takes it, and each job's place in it."""
        if self._order is None:
            jobs = [job for _, job, _ in book.queue_order()]
            if self._placer.lookahead is not None:
                jobs = await self._placer.sharing.order(jobs, book, len(await self._fleet()))
            self._jobs, self._order = jobs, {job.job_id: k for k, job in enumerate(jobs)}
        return self._jobs, self._order

    async def _queued(self, book: JobBook, view: JobView, now: datetime) -> JobView:
        entry = book.queued.get(view.id)
        if entry is None:
            return view  # the book has not seen it yet (submitted a moment ago): the next read has it
        job = entry[1]
        jobs, order = await self._ordered(book)
        place = order.get(view.id)
        if place is None:
            return view  # placed while the order was read: the next read has it where it went
        capable = [c.follower_id for c in await self._fleet() if unable_reason(job, c) is None]
        if not capable:
            return view.model_copy(update={"queue_position": place + 1})  # no start to estimate: waiting_reason says why
        ahead = [j.estimate_s for j in jobs[:place] if (j.backends, j.needs) == (job.backends, job.needs)]
        loads = [(book.loads[f].seconds if f in book.loads else 0.0) for f in capable]
        heapq.heapify(loads)
        for estimate in ahead:
            heapq.heapreplace(loads, loads[0] + estimate)
        return view.model_copy(update={"queue_position": place + 1, "estimated_start": _at(loads[0], now)})

    async def fill(self, view: JobView) -> JobView:
        """The view with queue_position and estimated_start filled for a queued or assigned job (else unchanged)."""
        book = self._placer.book
        if book is None:
            return view  # the placer has not loaded its book yet (the leader just started)
        now = utcnow()
        if view.state == JobState.assigned and view.follower_id:
            return await _assigned(self._db, book, view, now)
        if view.state == JobState.queued:
            return await self._queued(book, view, now)
        return view


def _as_queued(plan: JobPlan, model: ModelMeta) -> QueuedJob:
    """A checked submission as the placer's book would hold it once stored."""
    spec = plan.spec
    doc = {"_id": "", "attempt": 1, "spec": spec.model_dump(mode="json"), "model": model.model_dump(), "model_ref": model.ref}
    return queued_job({**doc, "base_estimate_s": plan.estimate_s, "measured_s": plan.measured_s})


async def unplaceable(db: AsyncDatabase, *, plan: JobPlan, model: ModelMeta, policy: Policy) -> str | None:
    """Why no follower can run this submission now, whatever it waits behind (a backend none offers, a GPU none has,
    every follower draining); None when one can. One pass over the followers: cheap enough for every submission."""
    job = _as_queued(plan, model)
    candidates = await followers_store.candidates(db)
    if choose_follower(job=job, candidates=candidates, loads={}, policy=policy) is not None:
        return None
    return explain_unplaceable(job, candidates)


async def preview(db: AsyncDatabase, book: JobBook | None, *, plan: JobPlan, model: ModelMeta, policy: Policy) -> SubmitPreview:
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
    candidates = await followers_store.candidates(db)
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
