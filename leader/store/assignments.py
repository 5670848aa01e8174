"""The placer's side of the jobs collection: the queue and load it reads, and the transitions it makes (assign,
unassign, requeue: decided by leader/lifecycle.py, each written with one conditional update) and the dispatch mark."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase

from common.wire.jobs import JobState, JobTask, JobView
from leader import lifecycle
from leader.clock import utcnow
from leader.domain import JobChange, Load, QueuedJob
from leader.store.jobdocs import BOOK_FIELDS, LIFECYCLE_FIELDS, applied, job_change, job_task, job_view, lifecycle_job, queued_job
from leader.store.jobs import ACTIVE_STATES, COLLECTION, apply_change, carry_out
from leader.store.lookup import id_chunks


async def queued_jobs(db: AsyncDatabase, *, limit: int) -> list[QueuedJob]:
    """Queued jobs, oldest first."""
    cursor = (
        db[COLLECTION]
        .find(
            {"state": JobState.queued.value},
            BOOK_FIELDS,
        )
        .sort([("created_at", ASCENDING), ("_id", ASCENDING)])
    )
    return [queued_job(d) for d in await cursor.limit(limit).to_list(limit)]


async def launchable(db: AsyncDatabase, *, limit: int) -> list[str]:
    """Queued jobs that no follower is pinned to and no on-demand pod was launched for (split jobs aside: their parts
    are the jobs), shortest estimate first."""
    query = {"state": JobState.queued.value, "spec.requires.follower": None, "ondemand": {"$exists": False}, "parts": None}
    cursor = db[COLLECTION].find(query, {"_id": 1}).sort([("estimate_s", ASCENDING), ("created_at", ASCENDING)])
    return [d["_id"] for d in await cursor.limit(limit).to_list(limit)]


async def set_waiting_reasons(db: AsyncDatabase, *, job_ids: list[str], reason: str | None) -> None:
    """Record one reason for several queued jobs, one write per IDS_PER_READ of them (no transition; `updated_at`
    moves, as with every write to a job: the feeds and the jobs list's kept views follow it). A job that already
    stores the reason is left alone: the placer's book may ask again for a job whose stored reason it read before its
    own write landed, and a rewrite would move the job for nothing (a reader's ETag of the list with it)."""
    now = utcnow()
    for chunk in id_chunks(job_ids):
        query = {"_id": {"$in": chunk}, "state": JobState.queued.value, "waiting_reason": {"$ne": reason}}
        await db[COLLECTION].update_many(query, {"$set": {"waiting_reason": reason, "updated_at": now}})


async def unfinished_jobs(db: AsyncDatabase) -> list[JobChange]:
    """Every queued, assigned or running job (book fields only): the placer's full load at start and on resync."""
    query = {"state": {"$in": [JobState.queued.value, *ACTIVE_STATES]}}
    return [job_change(doc) for doc in await db[COLLECTION].find(query, BOOK_FIELDS).to_list(None)]


async def changed_since(db: AsyncDatabase, *, since: Any) -> list[JobChange]:
    """Jobs (book fields only) whose last transition is at or after `since`: the placer's change feed."""
    return [job_change(doc) for doc in await db[COLLECTION].find({"updated_at": {"$gte": since}}, BOOK_FIELDS).to_list(None)]


async def assigned_task(db: AsyncDatabase, *, job_id: str) -> tuple[str, JobTask] | None:
    """(follower, task) of a job still assigned and not known to be dispatched; None otherwise."""
    doc = await db[COLLECTION].find_one({"_id": job_id, "state": JobState.assigned.value, "dispatched": False})
    return (doc["follower_id"], job_task(doc)) if doc is not None else None


async def running_on(db: AsyncDatabase, *, follower_id: str) -> JobView | None:
    """The job running on the follower, if any."""
    doc = await db[COLLECTION].find_one({"follower_id": follower_id, "state": JobState.running.value})
    return job_view(doc) if doc is not None else None


SCHEDULER_COLLECTION = "scheduler"


async def get_cursor(db: AsyncDatabase) -> str | None:
    """The follower round-robin placement chose last."""
    doc = await db[SCHEDULER_COLLECTION].find_one({"_id": "round_robin"})
    return doc["last"] if doc is not None else None


async def set_cursor(db: AsyncDatabase, follower_id: str) -> None:
    """Remember the follower round-robin placement chose last."""
    await db[SCHEDULER_COLLECTION].update_one({"_id": "round_robin"}, {"$set": {"last": follower_id}}, upsert=True)


async def active_loads(db: AsyncDatabase) -> dict[str, Load]:
    """Per follower: the summed estimate and the number of its assigned/running jobs."""
    pipeline: list[dict[str, Any]] = [
        {"$match": {"state": {"$in": ACTIVE_STATES}}},
        {"$group": {"_id": "$follower_id", "seconds": {"$sum": "$estimate_s"}, "jobs": {"$sum": 1}}},
    ]
    rows = await (await db[COLLECTION].aggregate(pipeline)).to_list(None)
    return {row["_id"]: Load(float(row["seconds"]), int(row["jobs"])) for row in rows if row["_id"] is not None}


async def assign_job(
    db: AsyncDatabase,
    *,
    job_id: str,
    attempt: int,
    follower_id: str,
    estimate_s: float | None = None,
    spread_s: float | None = None,
) -> JobTask | None:
    """queued → assigned (not yet dispatched), with the estimate corrected for this follower; None if the job moved.
    The placer's book knows the attempt, so the change is decided without a read."""
    queued = lifecycle.Job(job_id, JobState.queued, attempt)
    change = lifecycle.assign(queued, follower_id=follower_id, now=utcnow(), estimate_s=estimate_s, spread_s=spread_s)
    if change is None or not await apply_change(db, change):
        return None
    doc = await db[COLLECTION].find_one({"_id": job_id})
    # Whatever happened since (a cancel) the follower learns on claim; the task is this attempt's.
    return job_task(doc) if doc is not None else None


async def mark_dispatched(db: AsyncDatabase, *, job_id: str, attempt: int) -> None:
    """Record that the attempt's message is on the follower's queue."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "attempt": attempt}, {"$set": {"dispatched": True, "dispatched_at": utcnow()}}
    )


async def unassign_job(db: AsyncDatabase, *, job_id: str, attempt: int, reason: str) -> None:
    """assigned (never sent) → queued, same attempt: the follower never saw it."""
    sent_nothing = lifecycle.Job(job_id, JobState.assigned, attempt, dispatched=False)
    if (change := lifecycle.unassign(sent_nothing, reason=reason, now=utcnow())) is not None:
        await apply_change(db, change)


async def requeue_follower_jobs(
    db: AsyncDatabase,
    *,
    follower_ids: list[str],
    reason: str,
    states: list[str] | None = None,
    lost: Mapping[str, str | None] | None = None,
) -> list[str]:
    """Put every assigned/running job (or those in `states`) of these followers back in the queue as a new attempt.

    `lost` (follower id → the incarnation that stopped): the followers stopped without giving them back, so each running
    job records the loss (lifecycle.requeue fails a job that lost too many runs; forgive() takes a loss back). Returns
    the ids of those that moved; `reason` may contain `{follower_id}`.
    """
    if not follower_ids:
        return []
    docs = (
        await db[COLLECTION]
        .find({"follower_id": {"$in": follower_ids}, "state": {"$in": states or ACTIVE_STATES}}, LIFECYCLE_FIELDS)
        .to_list(None)
    )
    moved = []
    for doc in docs:
        follower_id = doc["follower_id"]
        lost_to = lifecycle.loss_key(follower_id, lost[follower_id]) if lost is not None and follower_id in lost else None
        if await _requeue(db, doc, reason, lost_to=lost_to):
            moved.append(doc["_id"])
    return moved


async def _requeue(db: AsyncDatabase, doc: dict[str, Any], reason: str, *, lost_to: str | None = None) -> bool:
    """One job back to the queue as a new attempt (or failed: lifecycle.requeue); False if it moved meanwhile."""
    change = lifecycle.requeue(lifecycle_job(doc), reason=reason, now=utcnow(), lost_to=lost_to)
    if change is None or not await apply_change(db, change):
        return False
    await carry_out(db, applied(doc, change), change.effects)  # a part failed so settles its split job
    return True


async def forgive(db: AsyncDatabase, *, follower_id: str, incarnation: str) -> list[str]:
    """This follower process was heard again after it went missing: it was silent (a starved host, a partition), not
    dead, so the runs it lost count against no job (lifecycle.requeue). Returns the ids of the jobs it forgave."""
    key = lifecycle.loss_key(follower_id, incarnation)
    unfinished = {"state": {"$in": [JobState.queued.value, *ACTIVE_STATES]}, "lost_to": key}  # an ended job keeps its record
    ids = [doc["_id"] for doc in await db[COLLECTION].find(unfinished, {"_id": 1}).to_list(None)]
    if ids:
        await db[COLLECTION].update_many({"_id": {"$in": ids}}, {"$pull": {"lost_to": key}})
    return ids


UNDELIVERED_REASON = "follower {follower_id} never received it (the broker lost the message)"


async def requeue_undelivered(
    db: AsyncDatabase,
    *,
    follower_id: str,
    held: set[str],
    sent_age_s: Callable[[tuple[str, int]], float],
    after_s: float,
    among: list[str] | None = None,
) -> list[str]:
    """Jobs sent to this follower at least `after_s` ago (`sent_age_s((job_id, attempt))`, monotonic) that its heartbeat
    does not hold: requeued as a new attempt.

    The old attempt's message, should it turn up after all, is refused at claim and dropped on the next heartbeat.
    With `among` (the placer's book's overdue candidates), only those are read.
    """
    ids: dict[str, Any] = {"$nin": list(held)} if among is None else {"$in": [j for j in among if j not in held]}
    query = {"follower_id": follower_id, "state": JobState.assigned.value, "dispatched": True, "_id": ids}
    docs = await db[COLLECTION].find(query, LIFECYCLE_FIELDS).to_list(None)
    docs = [doc for doc in docs if sent_age_s((doc["_id"], doc["attempt"])) >= after_s]
    return [doc["_id"] for doc in docs if doc["_id"] not in held and await _requeue(db, doc, UNDELIVERED_REASON)]
