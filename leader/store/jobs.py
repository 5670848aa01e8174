"""Jobs in PerfDB: one document per job, stored from its plan, and the submitter's and the follower's transitions
(cancel, claim, progress, finish) written. What each transition does is leader/lifecycle.py's to decide; here it is
written with one conditional update under its guard, and its follow-on effects carried out. The placer's transitions
are written by leader/store/assignments.py, with apply_change."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import Conflict
from common.wire.jobs import TERMINAL_STATES, Claim, FinishReport, JobState, JobTask, JobView
from common.wire.models import ModelMeta
from leader import lifecycle
from leader.clock import as_utc, utcnow
from leader.jobplan import JobPlan
from leader.store import durations as durations_store
from leader.store import followers as followers_store
from leader.store import shard_points as shard_points_store
from leader.store.jobdocs import (
    LIFECYCLE_FIELDS,
    applied,
    change_filter,
    change_update,
    history_entry,
    job_task,
    job_view,
    lifecycle_job,
)
from leader.store.lookup import by_id, by_ids

COLLECTION = "jobs"
# Jobs deleted (leader.store.deletion), by the sha256 of their id (a deleted job leaves no id behind) and when: what
# keeps the jobs list's index (leader.store.joblist) from showing a deleted job it kept, in every leader reading the
# database. Kept a day.
TOMBSTONES = "job_tombstones"
TOMBSTONE_KEEP = timedelta(days=1)
ACTIVE_STATES = [JobState.assigned.value, JobState.running.value]
TERMINAL = [state.value for state in TERMINAL_STATES]


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Indexes for the queue scan, per-follower lookups and the model-in-use check."""
    jobs = db[COLLECTION]
    await jobs.create_index([("state", ASCENDING), ("created_at", ASCENDING)])
    await jobs.create_index([("follower_id", ASCENDING), ("state", ASCENDING)])
    await jobs.create_index([("model_ref", ASCENDING), ("state", ASCENDING)])
    # The placer's change feed reads jobs by the time of their last transition; the queue limit counts per owner.
    await jobs.create_index([("updated_at", ASCENDING)])
    await jobs.create_index([("owner", ASCENDING), ("state", ASCENDING)])
    await db[TOMBSTONES].create_index([("at", ASCENDING)])


def tombstone_key(job_id: str) -> str:
    """What a deleted job's tombstone is named by."""
    return hashlib.sha256(job_id.encode()).hexdigest()


async def mark_deleted(db: AsyncDatabase, *, job_ids: list[str]) -> None:
    """Record that these jobs were deleted (and forget the records older than TOMBSTONE_KEEP)."""
    now = utcnow()
    await db[TOMBSTONES].delete_many({"at": {"$lt": now - TOMBSTONE_KEEP}})
    for key in map(tombstone_key, job_ids):
        await db[TOMBSTONES].replace_one({"_id": key}, {"_id": key, "at": now}, upsert=True)


async def deleted_since(db: AsyncDatabase, *, since: datetime) -> set[str]:
    """The tombstone keys of the jobs deleted since `since` (within TOMBSTONE_KEEP)."""
    return {d["_id"] async for d in db[TOMBSTONES].find({"at": {"$gte": since}}, {"_id": 1})}


async def insert_job(
    db: AsyncDatabase,
    *,
    plan: JobPlan,
    model: ModelMeta,
    owner: str = "admin",
    colocated: list[ModelMeta] | None = None,
    traceparent: str | None = None,
) -> JobView:
    """Store a planned job as queued (attempt 1), its parts first when it splits or is sharded; acknowledged before
    returning. A sharded job's parts come pinned each to its follower (leader/placement/pins.py; shard 0 coordinates)."""
    # The job is its model's team's: a submitter uses only its own team's models, an admin any team's.
    now, spec = utcnow(), plan.spec
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
        "colocated_models": [m.model_dump() for m in colocated or []],  # a co-location job's other models, the same way
        "points": [p.model_dump(mode="json") for p in plan.points],
        "points_total": len(plan.points),
        "points_done": 0,
        "estimate_s": plan.estimate_s,
        # The spec's estimate; estimate_s becomes the history's correction of it for the follower chosen.
        "base_estimate_s": plan.estimate_s,
        # The load's share of it (points × (warm-up + duration)): the estimator fits overhead + rate × this.
        "measured_s": plan.measured_s,
        "created_at": now,
        "updated_at": now,
        "error": None,
        "owner": owner,
        "team": model.team,
        "history": [history_entry(JobState.queued, 1, reason="submitted")],
        "traceparent": traceparent,
    }
    if not plan.parts:
        await db[COLLECTION].insert_one(doc)
        return job_view(doc)
    # A split job: each part is a job of its own (placed, claimed, requeued and reported like any job, so a part lost
    # to a dead follower is requeued alone); the split job itself is never placed and settles when its parts have.
    n = len(plan.parts)
    children = [
        {
            **doc,
            "_id": f"{doc['_id']}-p{k}",
            # Numbered from 0 within the part (the follower and the point reports work per job); part_start maps back.
            "points": [p.model_dump(mode="json") for p in part.points],
            "points_total": len(part.points),
            "estimate_s": part.estimate_s,
            "base_estimate_s": part.estimate_s,
            "measured_s": part.measured_s,
            "part_of": doc["_id"],
            "part_start": part.start,
            "history": [history_entry(JobState.queued, 1, reason=f"part {k + 1} of {n} of job {doc['_id']}")],
        }
        for k, part in enumerate(plan.parts)
    ]
    doc["parts"] = [c["_id"] for c in children]
    doc["history"] = [history_entry(JobState.queued, 1, reason=f"submitted; split into {n} parts")]
    for child, part in zip(children, plan.parts, strict=True):
        if part.spec is not None:  # its own spec (a shard pinned to its follower by placement)
            child["spec"] = part.spec.model_dump(mode="json")
    if plan.sharded:
        # Each shard waits for its own follower (placement pinned it); shard 0 merges the others' records.
        followers = [str(part.spec.requires.follower) if part.spec else "?" for part in plan.parts]
        doc["shards"] = n
        reason = f"submitted; driven by {n} followers at once ({', '.join(followers)})"
        doc["history"] = [history_entry(JobState.queued, 1, reason=reason)]
        for k, (child, follower) in enumerate(zip(children, followers, strict=True)):
            why = f"shard {k} of {n} of job {doc['_id']}, on follower {follower}"
            child["shard"] = {"of": doc["_id"], "index": k, "count": n}
            child["history"] = [history_entry(JobState.queued, 1, reason=why)]
    # The parts first: a reader that sees the split job finds every part it names.
    await db[COLLECTION].insert_many(children, ordered=True)
    await db[COLLECTION].insert_one(doc)
    return job_view(doc)


async def part_attempts(db: AsyncDatabase, *, job_id: str) -> list[tuple[str, int, int]]:
    """(part id, its current attempt, index of its first point in the split job's grid) for each part whose points
    are the job's (counted_parts), in order."""
    doc = await _get_doc(db, job_id)
    parts = await db[COLLECTION].find({"_id": {"$in": counted_parts(doc)}}, {"attempt": 1, "part_start": 1}).to_list(None)
    return sorted((p["_id"], int(p["attempt"]), int(p["part_start"])) for p in parts)


async def _get_doc(db: AsyncDatabase, job_id: str) -> dict[str, Any]:
    return await by_id(db, COLLECTION, job_id, what="job")


async def get_job(db: AsyncDatabase, *, job_id: str, team: str | None = None, field: str = "id") -> JobView:
    """One job (of `team`, when given); NotFound naming `field` if unknown. A split job counts its parts' points."""
    doc = await by_id(db, COLLECTION, job_id, what="job", team=team, field=field)
    await count_parts(db, [doc])
    return job_view(doc)


async def count_parts(db: AsyncDatabase, docs: list[dict[str, Any]]) -> None:
    """A split job among `docs` shows its parts' progress: its points_done set to theirs, every part read by id
    (lookup.by_ids), the parts of all of `docs` together."""
    part_ids = [part for doc in docs for part in counted_parts(doc)]
    if part_ids:
        done = {p["_id"]: int(p.get("points_done", 0)) async for p in by_ids(db, COLLECTION, part_ids, {"points_done": 1})}
        for doc in docs:
            if doc.get("parts"):
                doc["points_done"] = sum(done.get(part, 0) for part in counted_parts(doc))


def counted_parts(doc: dict[str, Any]) -> list[str]:
    """The parts whose points are the job's (lifecycle.counted_parts)."""
    return list(lifecycle.counted_parts(doc.get("parts") or (), sharded=bool(doc.get("shards"))))


async def model_in_use(db: AsyncDatabase, *, model_ref: str) -> bool:
    """Whether a job that is not finished refers to the model."""
    return await db[COLLECTION].count_documents({"model_ref": model_ref, "state": {"$nin": TERMINAL}}, limit=1) > 0


async def set_model_trusted(db: AsyncDatabase, *, model_ref: str, trusted: bool) -> int:
    """Carry a model's `trusted` mark into the unfinished jobs that hold a copy of its metadata; how many changed."""
    # updated_at moves too: the placer's change feed reads the job again (a trusted model's job may go elsewhere).
    done = await db[COLLECTION].update_many(
        {"model_ref": model_ref, "state": {"$nin": TERMINAL}}, {"$set": {"model.trusted": trusted, "updated_at": utcnow()}}
    )
    return int(done.modified_count)


async def cancel_job(db: AsyncDatabase, *, job_id: str, reason: str = "cancelled by user") -> JobView:
    """Cancel a job that has not finished; Conflict if it has. A follower holding it learns on its next report."""
    return await _end_job(db, job_id=job_id, state=JobState.cancelled, reason=reason)


async def fail_job(db: AsyncDatabase, *, job_id: str, reason: str) -> JobView:
    """Fail a job that has not finished, from outside its attempt (its on-demand pod failed); Conflict if it ended."""
    return await _end_job(db, job_id=job_id, state=JobState.failed, reason=reason)


async def _end_job(db: AsyncDatabase, *, job_id: str, state: JobState, reason: str) -> JobView:
    doc, _ = await transition(db, job_id, lambda job: lifecycle.end(job, state=state, reason=reason, now=utcnow()))
    return job_view(doc)


Transition = Callable[[lifecycle.Job], lifecycle.Change | None]
TRIES = 20  # a job moves a handful of times in its life: a guard that fails this often is a defect, not a race


async def apply_change(db: AsyncDatabase, change: lifecycle.Change) -> bool:
    """Write one Change with one conditional update (by _id, under its guard); False if the guard no longer held.

    Why not find_one_and_update: SecantusDB (the embedded PerfDB) answers findAndModify with a collection scan even
    when the filter names _id (bench/scheduler.py measures it: claim latency grows with the number of jobs), while a
    conditional update_one and a find_one by _id both use the _id index.
    """
    return bool((await db[COLLECTION].update_one(change_filter(change), change_update(change))).modified_count)


async def transition(db: AsyncDatabase, job_id: str, step: Transition) -> tuple[dict[str, Any], lifecycle.Change | None]:
    """Read the job, decide its transition (`step`, from leader/lifecycle.py), write it under its guard and carry out
    its effects; decided again on the job as it then is if it moved between the read and the write. The document as
    the change left it, and the change (None: nothing to do). A refusal (Conflict) propagates."""
    for _ in range(TRIES):
        doc = await _get_doc(db, job_id)
        change = step(lifecycle_job(doc))
        if change is None:
            return doc, None
        if await apply_change(db, change):
            doc = applied(doc, change)
            await carry_out(db, doc, change.effects)
            return doc, change
    raise Conflict(f"job {job_id} kept changing while it was being updated; try again", field="id")


async def carry_out(db: AsyncDatabase, doc: dict[str, Any], effects: tuple[lifecycle.Effect, ...]) -> None:
    """The follow-on effects of a written Change, in order (leader/lifecycle.py names each)."""
    for effect in effects:
        match effect:
            case lifecycle.RecordRunTime(actual_s=actual_s, follower_id=follower_id):
                await _record_actual(db, doc, follower_id, actual_s)
            case lifecycle.CancelParts(part_ids=part_ids, reason=reason):
                await _cancel_parts(db, list(part_ids), reason=reason)
            case lifecycle.StartSplit(job_id=split_id, part_id=part_id):
                await transition(db, split_id, partial(_start_split, part_id=part_id))
            case lifecycle.SettleSplit(job_id=split_id):
                await settle_split(db, job_id=split_id)
            case lifecycle.CancelOwingShards(job_id=split_id, reason=reason):
                parent = await db[COLLECTION].find_one({"_id": split_id}, {"parts": 1})
                delivered = await shard_points_store.delivered(db, job_id=split_id)
                owing = lifecycle.shards_owing((parent or {}).get("parts", []), delivered, points=len(doc["points"]))
                await _cancel_parts(db, owing, reason=reason)


def _start_split(job: lifecycle.Job, *, part_id: str) -> lifecycle.Change | None:
    return lifecycle.start_split(job, part_id=part_id, now=utcnow())


async def _cancel_parts(db: AsyncDatabase, part_ids: list[str], *, reason: str) -> None:
    """Each part stops like any cancelled job (its follower learns on the next heartbeat); finished parts stay."""
    for part_id in part_ids:
        part = await db[COLLECTION].find_one({"_id": part_id}, {"state": 1})
        if part is not None and part["state"] not in TERMINAL:
            with contextlib.suppress(Conflict):  # it finished meanwhile
                await cancel_job(db, job_id=part_id, reason=reason)


async def claim_job(db: AsyncDatabase, *, job_id: str, claim: Claim) -> JobTask:
    """assigned → running for exactly this follower and attempt, once; Conflict otherwise."""
    step = partial(lifecycle.claim, attempt=claim.attempt, follower_id=claim.follower_id)
    doc, _ = await transition(db, job_id, lambda job: step(job, now=utcnow()))
    return job_task(doc)


async def running_attempt(db: AsyncDatabase, *, job_id: str, attempt: int, follower_id: str) -> JobView:
    """The job if this attempt is running on this follower; Conflict otherwise (reports of stale attempts are refused)."""
    doc = await _get_doc(db, job_id)
    lifecycle.check_running(lifecycle_job(doc), attempt=attempt, follower_id=follower_id)
    return job_view(doc)


async def set_points_done(db: AsyncDatabase, *, job_id: str, attempt: int, points_done: int) -> None:
    """Record how many points of the attempt are stored (a count, so retried reports never inflate it)."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "attempt": attempt}, {"$set": {"points_done": points_done, "updated_at": utcnow()}}
    )


async def finish_job(db: AsyncDatabase, *, job_id: str, report: FinishReport) -> JobView:
    """running → succeeded/failed for this attempt; repeating the same finish is a no-op, anything else a Conflict. The
    run time goes into the same write as the final state, so no reader sees one without the other."""
    step = partial(
        lifecycle.finish,
        attempt=report.attempt,
        follower_id=report.follower_id,
        state=JobState(report.state),
        error=report.error,
        elapsed_s=report.elapsed_s,
    )
    doc, _ = await transition(db, job_id, lambda job: step(job, now=utcnow()))
    return job_view(doc)


async def settle_split(db: AsyncDatabase, *, job_id: str) -> None:
    """Finish a split job once every part has (lifecycle.settle); exactly once, however many parts report at once."""

    async def parts_of(job: lifecycle.Job) -> list[lifecycle.Part]:
        fields = {"state": 1, "points_done": 1, "error": 1}
        found = await db[COLLECTION].find({"_id": {"$in": list(job.parts)}}, fields).to_list(None)
        return [lifecycle.Part(p["_id"], JobState(p["state"]), int(p.get("points_done", 0)), p.get("error")) for p in found]

    for _ in range(TRIES):
        doc = await db[COLLECTION].find_one({"_id": job_id}, LIFECYCLE_FIELDS)
        if doc is None:
            return
        job = lifecycle_job(doc)
        change = lifecycle.settle(job, await parts_of(job), now=utcnow()) if job.parts and not job.finished else None
        if change is None or await apply_change(db, change):
            return


async def _record_actual(db: AsyncDatabase, doc: dict[str, Any], follower_id: str, actual_s: float) -> None:
    """Feed the estimator's history with the attempt's measured run time against its spec estimate."""
    await durations_store.record(
        db,
        model_ref=doc["model_ref"],
        backends=durations_store.backends_key(doc["spec"]["backends"]),
        follower_id=follower_id,
        estimate_s=doc["base_estimate_s"],
        actual_s=actual_s,
        measured_s=doc["measured_s"],
        follower_class=await followers_store.class_of(db, follower_id=follower_id),
    )


async def stale_held(db: AsyncDatabase, *, follower_id: str, held: list[tuple[str, int]]) -> list[str]:
    """Of the (job, attempt) pairs a follower holds, those the leader no longer wants it to run (cancelled, requeued)."""
    if not held:
        return []
    query = {"_id": {"$in": [job_id for job_id, _ in held]}}
    docs = await db[COLLECTION].find(query, LIFECYCLE_FIELDS).to_list(None)
    return lifecycle.stale_held(follower_id, held, {doc["_id"]: lifecycle_job(doc) for doc in docs})


async def soonest_finish_s(db: AsyncDatabase) -> float | None:
    """Estimated seconds until the first running job ends (its estimate less its time running); None if none runs."""
    now = utcnow()
    remaining = []
    async for doc in db[COLLECTION].find({"state": JobState.running.value}, {"estimate_s": 1, "history": 1}):
        started = [h["at"] for h in doc.get("history", []) if h["state"] == JobState.running.value]
        ran_s = (now - as_utc(started[-1])).total_seconds() if started else 0.0
        remaining.append(max(0.0, float(doc.get("estimate_s", 0.0)) - max(0.0, ran_s)))
    return min(remaining) if remaining else None


async def count_waiting(db: AsyncDatabase, *, owner: str) -> int:
    """How many of the owner's jobs wait to run (queued at the leader, or assigned to a follower and not started)."""
    query = {"owner": owner, "state": {"$in": [JobState.queued.value, JobState.assigned.value]}, "parts": {"$exists": False}}
    return await db[COLLECTION].count_documents(query)


async def pin_queued(db: AsyncDatabase, *, job_id: str, follower_id: str, launch: dict[str, Any]) -> bool:
    """Pin a queued, unpinned job to a follower that does not exist yet (its on-demand pod), recording the launch;
    False if it was placed, pinned or launched meanwhile (so a job is launched once)."""
    query = {"_id": job_id, "state": JobState.queued.value, "spec.requires.follower": None, "ondemand": {"$exists": False}}
    update = {"$set": {"spec.requires.follower": follower_id, "ondemand": launch, "updated_at": utcnow()}}
    return (await db[COLLECTION].update_one(query, update)).modified_count == 1


async def jobs_per_model(db: AsyncDatabase, *, model_refs: list[str]) -> dict[str, int]:
    """How many jobs (of any state) name each model (name:version), in one read."""
    counts: dict[str, int] = {}
    async for doc in db[COLLECTION].find({"model_ref": {"$in": model_refs}}, {"model_ref": 1}):
        counts[doc["model_ref"]] = counts.get(doc["model_ref"], 0) + 1
    return counts
