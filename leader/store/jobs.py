"""Jobs in PerfDB: one document per job; every transition is a conditional update that appends its history entry."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from motor.motor_asyncio import AsyncIOMotorDatabase
from pymongo import ASCENDING, DESCENDING

from common.errors import Conflict, NotFound
from common.jobs import TERMINAL_STATES, Claim, FinishReport, JobState, JobTask, JobView, StateChange
from common.models import ModelMeta
from common.spec import JobSpec, PointSpec, SplitSpec, estimate_seconds, expand
from leader.clock import as_utc, utcnow
from leader.domain import Load, Needs, QueuedJob
from leader.store import durations as durations_store

COLLECTION = "jobs"
ACTIVE_STATES = [JobState.assigned.value, JobState.running.value]
TERMINAL = [state.value for state in TERMINAL_STATES]


async def ensure_indexes(db: AsyncIOMotorDatabase) -> None:
    """Indexes for the queue scan, per-follower lookups and the model-in-use check."""
    jobs = db[COLLECTION]
    await jobs.create_index([("state", ASCENDING), ("created_at", ASCENDING)])
    await jobs.create_index([("follower_id", ASCENDING), ("state", ASCENDING)])
    await jobs.create_index([("model_ref", ASCENDING), ("state", ASCENDING)])
    # The placer's change feed reads jobs by the time of their last transition; the queue limit counts per owner.
    await jobs.create_index([("updated_at", ASCENDING)])
    await jobs.create_index([("owner", ASCENDING), ("state", ASCENDING)])


def _change(state: JobState, attempt: int, *, reason: str | None = None, follower_id: str | None = None) -> dict[str, Any]:
    return StateChange(state=state, at=utcnow(), attempt=attempt, reason=reason, follower_id=follower_id).model_dump()


def job_view(doc: dict[str, Any]) -> JobView:
    """A stored job document as the API shows it (datetimes made UTC-aware)."""
    history = [StateChange.model_validate({**entry, "at": as_utc(entry["at"])}) for entry in doc["history"]]
    return JobView(
        id=doc["_id"],
        name=doc["name"],
        state=doc["state"],
        attempt=doc["attempt"],
        follower_id=doc.get("follower_id"),
        spec=JobSpec.model_validate(doc["spec"]),
        model_ref=doc["model_ref"],
        points_total=doc["points_total"],
        points_done=doc["points_done"],
        estimate_s=doc["estimate_s"],
        created_at=as_utc(doc["created_at"]),
        updated_at=as_utc(doc["updated_at"]),
        error=doc.get("error"),
        history=history,
        owner=doc.get("owner", "admin"),
        waiting_reason=doc.get("waiting_reason"),
        actual_s=doc.get("actual_s"),
        parts=doc.get("parts") or [],
        part_of=doc.get("part_of"),
        part_start=doc.get("part_start"),
    )


def job_task(doc: dict[str, Any]) -> JobTask:
    """The Celery payload for the job's current attempt."""
    model = {**doc["model"], "created_at": as_utc(doc["model"]["created_at"])}
    return JobTask(
        job_id=doc["_id"],
        attempt=doc["attempt"],
        spec=JobSpec.model_validate(doc["spec"]),
        points=doc["points"],
        model=ModelMeta.model_validate(model),
        estimate_s=doc["estimate_s"],
    )


async def insert_job(db: AsyncIOMotorDatabase, *, spec: JobSpec, model: ModelMeta, owner: str = "admin") -> JobView:
    """Store a new job as queued (attempt 1) in one insert, acknowledged before returning."""
    now = utcnow()
    points = expand(spec)
    doc: dict[str, Any] = {
        "_id": uuid.uuid4().hex,
        "name": spec.name,
        "state": JobState.queued.value,
        "attempt": 1,
        "follower_id": None,
        "dispatched": False,
        "spec": spec.model_dump(mode="json"),
        "model_ref": model.ref,
        # A snapshot of the model's metadata: the task sent later needs it, whatever happens to the repository.
        "model": model.model_dump(),
        "points": [p.model_dump(mode="json") for p in points],
        "points_total": len(points),
        "points_done": 0,
        "estimate_s": estimate_seconds(spec),
        # The spec's estimate; estimate_s becomes the history's correction of it for the follower chosen.
        "base_estimate_s": estimate_seconds(spec),
        # The load's share of it (points × (warm-up + duration)): the estimator fits overhead + rate × this.
        "measured_s": round(max(0.0, estimate_seconds(spec) - 5.0 * len(spec.backends)), 3),
        "created_at": now,
        "updated_at": now,
        "error": None,
        "owner": owner,
        "history": [_change(JobState.queued, 1, reason="submitted")],
    }
    parts = split_points(points, spec.split)
    if len(parts) < 2:
        await db[COLLECTION].insert_one(doc)
        return job_view(doc)
    # A split job: each part is a job of its own (placed, claimed, requeued and reported like any job, so a part lost
    # to a dead follower is requeued alone); the split job itself is never placed and settles when its parts have.
    per_point = (doc["estimate_s"] - 5.0 * len(spec.backends)) / len(points)
    children, start = [], 0
    for k, part in enumerate(parts):
        estimate = round(per_point * len(part) + 5.0 * len({p.backend for p in part}), 3)
        children.append(
            {
                **doc,
                "_id": f"{doc['_id']}-p{k}",
                "name": spec.name,
                # Numbered from 0 within the part (the follower and the point reports work per job); part_start maps back.
                "points": [p.model_copy(update={"index": i}).model_dump(mode="json") for i, p in enumerate(part)],
                "points_total": len(part),
                "estimate_s": estimate,
                "base_estimate_s": estimate,
                "measured_s": round(per_point * len(part), 3),
                "part_of": doc["_id"],
                "part_start": start,
                "history": [_change(JobState.queued, 1, reason=f"part {k + 1} of {len(parts)} of job {doc['_id']}")],
            }
        )
        start += len(part)
    doc["parts"] = [c["_id"] for c in children]
    doc["history"] = [_change(JobState.queued, 1, reason=f"submitted; split into {len(parts)} parts")]
    # The parts first: a reader that sees the split job finds every part it names.
    await db[COLLECTION].insert_many(children, ordered=True)
    await db[COLLECTION].insert_one(doc)
    return job_view(doc)


async def part_attempts(db: AsyncIOMotorDatabase, *, job_id: str) -> list[tuple[str, int, int]]:
    """(part id, its current attempt, index of its first point in the split job's grid) for each part, in order."""
    doc = await _get_doc(db, job_id)
    parts = await db[COLLECTION].find({"_id": {"$in": doc.get("parts") or []}}, {"attempt": 1, "part_start": 1}).to_list(None)
    return sorted((p["_id"], int(p["attempt"]), int(p["part_start"])) for p in parts)


def split_points(points: list[PointSpec], split: SplitSpec | None) -> list[list[PointSpec]]:
    """The grid's points in contiguous parts of near-equal size (one part when the spec asks for no split)."""
    if split is None:
        return [points]
    n = min(split.max_parts, len(points) // split.min_points)
    if n < 2:
        return [points]
    size, extra = divmod(len(points), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(points[start:end])
        start = end
    return out


async def _get_doc(db: AsyncIOMotorDatabase, job_id: str) -> dict[str, Any]:
    doc = await db[COLLECTION].find_one({"_id": job_id})
    if doc is None:
        raise NotFound(f"job {job_id} does not exist", field="id")
    return doc


async def get_job(db: AsyncIOMotorDatabase, *, job_id: str) -> JobView:
    """One job; NotFound if unknown. A split job counts the points its parts have done."""
    doc = await _get_doc(db, job_id)
    if doc.get("parts"):
        parts = await db[COLLECTION].find({"_id": {"$in": doc["parts"]}}, {"points_done": 1}).to_list(None)
        doc["points_done"] = sum(int(p.get("points_done", 0)) for p in parts)
    return job_view(doc)


async def list_jobs(db: AsyncIOMotorDatabase, *, state: JobState | None, limit: int) -> list[JobView]:
    """Jobs newest first, optionally of one state."""
    query = {"state": state.value} if state is not None else {}
    docs = await db[COLLECTION].find(query).sort([("created_at", DESCENDING), ("_id", DESCENDING)]).limit(limit).to_list(limit)
    # A split job shows its parts' progress, as get_job does: one read for every split job on the page.
    part_ids = [part for doc in docs for part in doc.get("parts") or []]
    if part_ids:
        parts = await db[COLLECTION].find({"_id": {"$in": part_ids}}, {"points_done": 1}).to_list(None)
        done = {p["_id"]: int(p.get("points_done", 0)) for p in parts}
        for doc in docs:
            if doc.get("parts"):
                doc["points_done"] = sum(done.get(part, 0) for part in doc["parts"])
    return [job_view(doc) for doc in docs]


async def count_jobs(db: AsyncIOMotorDatabase) -> int:
    """How many jobs are stored."""
    return await db[COLLECTION].count_documents({})


async def model_in_use(db: AsyncIOMotorDatabase, *, model_ref: str) -> bool:
    """Whether a job that is not finished refers to the model."""
    return await db[COLLECTION].count_documents({"model_ref": model_ref, "state": {"$nin": TERMINAL}}, limit=1) > 0


async def cancel_job(db: AsyncIOMotorDatabase, *, job_id: str) -> JobView:
    """Cancel a job that has not finished; Conflict if it has. A follower holding it learns on its next report."""
    current = await _get_doc(db, job_id)
    if current["state"] in TERMINAL:
        raise Conflict(f"job {job_id} is already {current['state']}", field="state")
    doc = await _update_then_read(
        db,
        {"_id": job_id, "state": current["state"], "attempt": current["attempt"]},
        {
            "$set": {"state": JobState.cancelled.value, "updated_at": utcnow()},
            "$push": {"history": _change(JobState.cancelled, current["attempt"], reason="cancelled by user")},
        },
    )
    if doc is None:
        # It moved between the read and the update; judge it again on its new state.
        return await cancel_job(db, job_id=job_id)
    for part_id in doc.get("parts") or []:
        # Each part stops like any cancelled job (its follower learns on the next heartbeat); finished parts stay.
        part = await db[COLLECTION].find_one({"_id": part_id}, {"state": 1})
        if part is not None and part["state"] not in TERMINAL:
            await cancel_job(db, job_id=part_id)
    if doc.get("part_of"):
        await settle_split(db, job_id=doc["part_of"])
    return job_view(doc)


async def _update_then_read(db: AsyncIOMotorDatabase, query: dict[str, Any], update: dict[str, Any]) -> dict[str, Any] | None:
    """A conditional update by _id, then the document read by _id; None if the condition did not hold.

    Why not find_one_and_update: SecantusDB (the embedded PerfDB) answers findAndModify with a collection scan even
    when the filter names _id (bench/scheduler.py measures it: claim latency grows with the number of jobs), while a
    conditional update_one and a find_one by _id both use the _id index. The read may see a later transition than
    ours; callers use only fields that a transition does not change, or re-check the attempt.
    """
    result = await db[COLLECTION].update_one(query, update)
    if not result.modified_count:
        return None
    return await db[COLLECTION].find_one({"_id": query["_id"]})


async def claim_job(db: AsyncIOMotorDatabase, *, job_id: str, claim: Claim) -> JobTask:
    """assigned → running for exactly this follower and attempt, once; Conflict otherwise."""
    doc = await _update_then_read(
        db,
        {"_id": job_id, "state": JobState.assigned.value, "attempt": claim.attempt, "follower_id": claim.follower_id},
        {
            # dispatched: the follower holds the message, whatever the leader managed to record before.
            "$set": {"state": JobState.running.value, "dispatched": True, "updated_at": utcnow()},
            "$push": {"history": _change(JobState.running, claim.attempt, follower_id=claim.follower_id)},
        },
    )
    if doc is None or doc["attempt"] != claim.attempt:
        current = await _get_doc(db, job_id)
        raise Conflict(_stale_reason(current, claim.attempt, claim.follower_id, wanted="assigned"), field="attempt")
    if doc.get("part_of"):
        # The split job runs once its first part does (a no-op for the later parts).
        await db[COLLECTION].update_one(
            {"_id": doc["part_of"], "state": JobState.queued.value},
            {
                "$set": {"state": JobState.running.value, "updated_at": utcnow()},
                "$push": {"history": _change(JobState.running, 1, reason=f"part {job_id} started")},
            },
        )
    return job_task(doc)


def _stale_reason(doc: dict[str, Any], attempt: int, follower_id: str, *, wanted: str) -> str:
    if doc["attempt"] != attempt:
        return f"attempt {attempt} is stale: job {doc['_id']} is on attempt {doc['attempt']}"
    if doc.get("follower_id") != follower_id:
        return f"job {doc['_id']} attempt {attempt} is not held by follower {follower_id}"
    return f"job {doc['_id']} is {doc['state']}, not {wanted}"


async def running_attempt(db: AsyncIOMotorDatabase, *, job_id: str, attempt: int, follower_id: str) -> JobView:
    """The job if this attempt is running on this follower; Conflict otherwise (reports of stale attempts are refused)."""
    doc = await _get_doc(db, job_id)
    if doc["state"] != JobState.running.value or doc["attempt"] != attempt or doc.get("follower_id") != follower_id:
        raise Conflict(_stale_reason(doc, attempt, follower_id, wanted="running"), field="attempt")
    return job_view(doc)


async def set_points_done(db: AsyncIOMotorDatabase, *, job_id: str, attempt: int, points_done: int) -> None:
    """Record how many points of the attempt are stored (a count, so retried reports never inflate it)."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "attempt": attempt}, {"$set": {"points_done": points_done, "updated_at": utcnow()}}
    )


async def finish_job(db: AsyncIOMotorDatabase, *, job_id: str, report: FinishReport) -> JobView:
    """running → succeeded/failed for this attempt; repeating the same finish is a no-op, anything else a Conflict."""
    state = JobState(report.state)
    now = utcnow()
    # The actual run time goes into the same write as the final state, so no reader sees one without the other.
    before = await db[COLLECTION].find_one({"_id": job_id}, {"history": 1})
    history = (before or {}).get("history", [])
    started = [h["at"] for h in history if h["state"] == JobState.running.value and h["attempt"] == report.attempt]
    actual_s = round((now - as_utc(started[-1])).total_seconds(), 3) if started and state == JobState.succeeded else None
    doc = await _update_then_read(
        db,
        {"_id": job_id, "state": JobState.running.value, "attempt": report.attempt, "follower_id": report.follower_id},
        {
            "$set": {"state": state.value, "error": report.error, "updated_at": now, "actual_s": actual_s},
            "$push": {"history": _change(state, report.attempt, reason=report.error, follower_id=report.follower_id)},
        },
    )
    if doc is not None:
        if actual_s is not None:
            await _record_actual(doc, report, actual_s, db)
        if doc.get("part_of"):
            await settle_split(db, job_id=doc["part_of"])
        return job_view(doc)
    current = await _get_doc(db, job_id)
    same = (
        current["attempt"] == report.attempt
        and current.get("follower_id") == report.follower_id
        and current["state"] == state.value
        and current.get("error") == report.error
    )
    if same:
        return job_view(current)
    raise Conflict(_stale_reason(current, report.attempt, report.follower_id, wanted="running"), field="attempt")


async def settle_split(db: AsyncIOMotorDatabase, *, job_id: str) -> None:
    """Finish a split job once every part has: succeeded if all did, else failed naming the parts that did not.

    Idempotent (the final write is conditional on the split job not being finished), so two parts finishing at
    once, or a retried finish report, settle it exactly once.
    """
    doc = await db[COLLECTION].find_one({"_id": job_id}, {"parts": 1, "state": 1, "points_total": 1})
    if doc is None or doc["state"] in TERMINAL or not doc.get("parts"):
        return
    parts = await db[COLLECTION].find({"_id": {"$in": doc["parts"]}}, {"state": 1, "points_done": 1, "error": 1}).to_list(None)
    if len(parts) < len(doc["parts"]) or any(p["state"] not in TERMINAL for p in parts):
        return
    bad = [p for p in parts if p["state"] != JobState.succeeded.value]
    if not bad:
        state, error = JobState.succeeded, None
    elif all(p["state"] == JobState.cancelled.value for p in bad):
        state, error = JobState.cancelled, None
    else:
        state = JobState.failed
        error = "; ".join(
            f"part {p['_id']} {p['state']}: {p.get('error') or 'no reason given'}" for p in sorted(bad, key=lambda p: p["_id"])
        )
    await db[COLLECTION].update_one(
        {"_id": job_id, "state": {"$nin": TERMINAL}},
        {
            "$set": {
                "state": state.value,
                "error": error,
                "points_done": sum(int(p.get("points_done", 0)) for p in parts),
                "updated_at": utcnow(),
            },
            "$push": {"history": _change(state, 1, reason=error or f"all {len(parts)} parts {state.value}")},
        },
    )


async def _record_actual(doc: dict[str, Any], report: FinishReport, actual_s: float, db: AsyncIOMotorDatabase) -> None:
    """Feed the estimator's history with the attempt's measured run time against its spec estimate."""
    await durations_store.record(
        db,
        model_ref=doc["model_ref"],
        backends=",".join(sorted(doc["spec"]["backends"])),
        follower_id=report.follower_id,
        estimate_s=doc.get("base_estimate_s", doc["estimate_s"]),
        actual_s=actual_s,
        measured_s=durations_store.measured_of(doc),
    )


async def stale_held(db: AsyncIOMotorDatabase, *, follower_id: str, held: list[tuple[str, int]]) -> list[str]:
    """Of the (job, attempt) pairs a follower holds, those the leader no longer wants it to run (cancelled, requeued)."""
    if not held:
        return []
    query = {"_id": {"$in": [job_id for job_id, _ in held]}}
    docs = await db[COLLECTION].find(query, {"state": 1, "attempt": 1, "follower_id": 1}).to_list(None)
    wanted = {(d["_id"], d["attempt"]) for d in docs if d["state"] in ACTIVE_STATES and d.get("follower_id") == follower_id}
    return sorted({job_id for job_id, attempt in held if (job_id, attempt) not in wanted})


async def follower_queue(db: AsyncIOMotorDatabase, *, follower_id: str) -> list[dict[str, Any]]:
    """The follower's assigned and running jobs (id, state, estimate, created_at), for queue positions."""
    return (
        await db[COLLECTION]
        .find(
            {"follower_id": follower_id, "state": {"$in": ACTIVE_STATES}},
            {"state": 1, "estimate_s": 1, "created_at": 1, "history": 1},
        )
        .to_list(None)
    )


async def queued_ahead(db: AsyncIOMotorDatabase, *, created_at: Any) -> int:
    """How many jobs wait in the leader's queue ahead of one submitted at created_at."""
    return await db[COLLECTION].count_documents({"state": JobState.queued.value, "created_at": {"$lt": created_at}})


# --- placement and liveness -------------------------------------------------------------------------------


async def queued_jobs(db: AsyncIOMotorDatabase, *, limit: int) -> list[QueuedJob]:
    """Queued jobs, oldest first."""
    cursor = (
        db[COLLECTION]
        .find(
            {"state": JobState.queued.value},
            {"attempt": 1, "spec.backends": 1, "spec.requires": 1, "estimate_s": 1, "base_estimate_s": 1, "waiting_reason": 1},
        )
        .sort([("created_at", ASCENDING), ("_id", ASCENDING)])
    )
    docs = await cursor.limit(limit).to_list(limit)
    return [
        QueuedJob(
            d["_id"],
            d["attempt"],
            frozenset(d["spec"]["backends"]),
            d.get("base_estimate_s", d["estimate_s"]),
            Needs(**(d["spec"].get("requires") or {})),
            d.get("waiting_reason"),
        )
        for d in docs
    ]


async def set_waiting_reason(db: AsyncIOMotorDatabase, *, job_id: str, attempt: int, reason: str | None) -> None:
    """Record why a queued job is not placed (shown in the job view)."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "state": JobState.queued.value, "attempt": attempt}, {"$set": {"waiting_reason": reason}}
    )


async def set_estimate(db: AsyncIOMotorDatabase, *, job_id: str, attempt: int, estimate_s: float) -> None:
    """Store the estimate corrected for the follower the attempt was assigned to."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "attempt": attempt}, {"$set": {"estimate_s": estimate_s, "updated_at": utcnow()}}
    )


async def set_waiting_reasons(db: AsyncIOMotorDatabase, *, job_ids: list[str], reason: str | None) -> None:
    """Record one reason for several queued jobs in one write (no transition: `updated_at` stays)."""
    if job_ids:
        await db[COLLECTION].update_many(
            {"_id": {"$in": job_ids}, "state": JobState.queued.value}, {"$set": {"waiting_reason": reason}}
        )


# What the placer's book keeps of a job (leader/scheduler/book.py).
BOOK_FIELDS = {
    key: 1
    for key in (
        "state", "attempt", "follower_id", "dispatched", "estimate_s", "base_estimate_s", "created_at", "updated_at",
        "spec.backends", "spec.requires", "waiting_reason", "model_ref", "owner", "parts", "part_of", "measured_s",
    )
}  # fmt: skip


async def unfinished_docs(db: AsyncIOMotorDatabase) -> list[dict[str, Any]]:
    """Every queued, assigned or running job (book fields only): the placer's full load at start and on resync."""
    query = {"state": {"$in": [JobState.queued.value, *ACTIVE_STATES]}}
    return await db[COLLECTION].find(query, BOOK_FIELDS).to_list(None)


async def changed_since(db: AsyncIOMotorDatabase, *, since: Any) -> list[dict[str, Any]]:
    """Jobs (book fields only) whose last transition is at or after `since`: the placer's change feed."""
    return await db[COLLECTION].find({"updated_at": {"$gte": since}}, BOOK_FIELDS).to_list(None)


async def assigned_task(db: AsyncIOMotorDatabase, *, job_id: str) -> tuple[str, JobTask] | None:
    """(follower, task) of a job still assigned and not known to be dispatched; None otherwise."""
    doc = await db[COLLECTION].find_one({"_id": job_id, "state": JobState.assigned.value, "dispatched": False})
    return (doc["follower_id"], job_task(doc)) if doc is not None else None


async def running_on(db: AsyncIOMotorDatabase, *, follower_id: str) -> JobView | None:
    """The job running on the follower, if any."""
    doc = await db[COLLECTION].find_one({"follower_id": follower_id, "state": JobState.running.value})
    return job_view(doc) if doc is not None else None


async def count_waiting(db: AsyncIOMotorDatabase, *, owner: str) -> int:
    """How many of the owner's jobs wait to run (queued at the leader, or assigned to a follower and not started)."""
    query = {"owner": owner, "state": {"$in": [JobState.queued.value, JobState.assigned.value]}, "parts": {"$exists": False}}
    return await db[COLLECTION].count_documents(query)


SCHEDULER_COLLECTION = "scheduler"


async def get_cursor(db: AsyncIOMotorDatabase) -> str | None:
    """The follower round-robin placement chose last."""
    doc = await db[SCHEDULER_COLLECTION].find_one({"_id": "round_robin"})
    return doc["last"] if doc is not None else None


async def set_cursor(db: AsyncIOMotorDatabase, follower_id: str) -> None:
    """Remember the follower round-robin placement chose last."""
    await db[SCHEDULER_COLLECTION].update_one({"_id": "round_robin"}, {"$set": {"last": follower_id}}, upsert=True)


async def active_loads(db: AsyncIOMotorDatabase) -> dict[str, Load]:
    """Per follower: the summed estimate and the number of its assigned/running jobs."""
    pipeline = [
        {"$match": {"state": {"$in": ACTIVE_STATES}}},
        {"$group": {"_id": "$follower_id", "seconds": {"$sum": "$estimate_s"}, "jobs": {"$sum": 1}}},
    ]
    rows = await db[COLLECTION].aggregate(pipeline).to_list(None)
    return {row["_id"]: Load(float(row["seconds"]), int(row["jobs"])) for row in rows if row["_id"] is not None}


async def assign_job(
    db: AsyncIOMotorDatabase, *, job_id: str, attempt: int, follower_id: str, estimate_s: float | None = None
) -> JobTask | None:
    """queued → assigned (not yet dispatched), with the estimate corrected for this follower; None if the job moved."""
    fields: dict[str, Any] = {
        "state": JobState.assigned.value,
        "follower_id": follower_id,
        "dispatched": False,
        "waiting_reason": None,
        "updated_at": utcnow(),
    }
    if estimate_s is not None:
        # In the same write as the transition, so no reader sees the follower's load without this job's estimate.
        fields["estimate_s"] = estimate_s
    # A conditional update_one, then a read by _id: SecantusDB answers findAndModify with a collection scan
    # (~300 ms per call at 10,000 jobs, bench/scheduler.py), while both of these use the _id index.
    result = await db[COLLECTION].update_one(
        {"_id": job_id, "state": JobState.queued.value, "attempt": attempt},
        {
            "$set": fields,
            "$push": {"history": _change(JobState.assigned, attempt, follower_id=follower_id)},
        },
    )
    if not result.modified_count:
        return None
    doc = await db[COLLECTION].find_one({"_id": job_id})
    # Whatever happened since (a cancel) the follower learns on claim; the task is this attempt's.
    return job_task(doc) if doc is not None else None


async def undispatched_jobs(db: AsyncIOMotorDatabase) -> list[tuple[str, JobTask]]:
    """(follower_id, task) of jobs assigned whose Celery message may never have been sent."""
    docs = (
        await db[COLLECTION]
        .find({"state": JobState.assigned.value, "dispatched": False})
        .sort("created_at", ASCENDING)
        .to_list(None)
    )
    return [(doc["follower_id"], job_task(doc)) for doc in docs]


async def mark_dispatched(db: AsyncIOMotorDatabase, *, job_id: str, attempt: int) -> None:
    """Record that the attempt's message is on the follower's queue."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "attempt": attempt}, {"$set": {"dispatched": True, "dispatched_at": utcnow()}}
    )


async def unassign_job(db: AsyncIOMotorDatabase, *, job_id: str, attempt: int, reason: str) -> None:
    """assigned (never sent) → queued, same attempt: the follower never saw it."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "state": JobState.assigned.value, "attempt": attempt, "dispatched": False},
        {
            "$set": {"state": JobState.queued.value, "follower_id": None, "updated_at": utcnow()},
            "$push": {"history": _change(JobState.queued, attempt, reason=reason)},
        },
    )


async def requeue_follower_jobs(
    db: AsyncIOMotorDatabase, *, follower_ids: list[str], reason: str, states: list[str] | None = None
) -> list[str]:
    """Put every assigned/running job (or those in `states`) of these followers back in the queue as a new attempt.

    Returns their ids; `reason` may contain `{follower_id}`.
    """
    if not follower_ids:
        return []
    docs = (
        await db[COLLECTION]
        .find(
            {"follower_id": {"$in": follower_ids}, "state": {"$in": states or ACTIVE_STATES}},
            {"attempt": 1, "state": 1, "follower_id": 1},
        )
        .to_list(None)
    )
    return [doc["_id"] for doc in docs if await _requeue(db, doc, reason)]


async def _requeue(db: AsyncIOMotorDatabase, doc: dict[str, Any], reason: str) -> bool:
    """One job back to the queue as a new attempt; False if it moved meanwhile (finished, cancelled, requeued)."""
    attempt = doc["attempt"]
    result = await db[COLLECTION].update_one(
        # Filtering on state and attempt makes this a no-op if the job moved (finished, cancelled) meanwhile.
        {"_id": doc["_id"], "state": doc["state"], "attempt": attempt, "follower_id": doc["follower_id"]},
        {
            "$set": {
                "state": JobState.queued.value,
                "follower_id": None,
                "dispatched": False,
                "points_done": 0,
                "updated_at": utcnow(),
            },
            "$inc": {"attempt": 1},
            "$push": {"history": _change(JobState.queued, attempt + 1, reason=reason.format(follower_id=doc["follower_id"]))},
        },
    )
    return bool(result.modified_count)


UNDELIVERED_REASON = "follower {follower_id} never received it (the broker lost the message)"


async def requeue_undelivered(
    db: AsyncIOMotorDatabase, *, follower_id: str, held: set[str], sent_before: datetime
) -> list[str]:
    """Jobs sent to this follower before `sent_before` that its heartbeat does not hold: requeued as a new attempt.

    The old attempt's message, should it turn up after all, is refused at claim and dropped on the next heartbeat.
    """
    docs = (
        await db[COLLECTION]
        .find(
            {"follower_id": follower_id, "state": JobState.assigned.value, "dispatched": True,
             "dispatched_at": {"$lt": sent_before}},
            {"attempt": 1, "state": 1, "follower_id": 1},
        )
        .to_list(None)
    )
    return [doc["_id"] for doc in docs if doc["_id"] not in held and await _requeue(db, doc, UNDELIVERED_REASON)]
