"""Jobs in PerfDB: one document per job, stored from its plan; the submitter's and the follower's transitions (cancel,
claim, progress, finish). Every transition is a conditional update that appends its history entry; the placer's
transitions are leader/store/assignments.py's."""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import Conflict
from common.wire.jobs import TERMINAL_STATES, Claim, FinishReport, JobFilter, JobState, JobTask, JobView
from common.wire.models import ModelMeta
from leader.clock import as_utc, utcnow
from leader.jobplan import JobPlan
from leader.store import durations as durations_store
from leader.store import followers as followers_store
from leader.store import shard_points as shard_points_store
from leader.store.jobdocs import history_entry, job_task, job_view
from leader.store.lookup import by_id, team_query

COLLECTION = "jobs"
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
    await jobs.create_index([("team", ASCENDING), ("created_at", DESCENDING)])  # a team's job list, newest first


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
    if doc.get("parts"):
        parts = await db[COLLECTION].find({"_id": {"$in": counted_parts(doc)}}, {"points_done": 1}).to_list(None)
        doc["points_done"] = sum(int(p.get("points_done", 0)) for p in parts)
    return job_view(doc)


def counted_parts(doc: dict[str, Any]) -> list[str]:
    """The parts whose points are the job's: every part of a split job; a sharded job's coordinator (shard 0) only,
    which merged every shard's records into its points."""
    parts: list[str] = doc.get("parts") or []
    return parts[:1] if doc.get("shards") else parts


async def list_jobs(
    db: AsyncDatabase, *, where: JobFilter, limit: int, after: tuple[datetime, str] | None = None, team: str | None = None
) -> list[JobView]:
    """Jobs newest first (of `team`, when given) that `where` selects; with `after` (created_at, id), those that come
    after it."""
    if team is not None and where.team and where.team != team:
        return []  # another team's jobs do not exist for this caller
    query: dict[str, Any] = {**where.query(), **team_query(team)}
    if after is not None:
        at, job_id = after
        query["$or"] = [{"created_at": {"$lt": at}}, {"created_at": at, "_id": {"$lt": job_id}}]
    docs = await db[COLLECTION].find(query).sort([("created_at", DESCENDING), ("_id", DESCENDING)]).limit(limit).to_list(limit)
    # A split job shows its parts' progress, as get_job does: one read for every split job on the page.
    part_ids = [part for doc in docs for part in doc.get("parts") or []]
    if part_ids:
        parts = await db[COLLECTION].find({"_id": {"$in": part_ids}}, {"points_done": 1}).to_list(None)
        done = {p["_id"]: int(p.get("points_done", 0)) for p in parts}
        for doc in docs:
            if doc.get("parts"):
                doc["points_done"] = sum(done.get(part, 0) for part in counted_parts(doc))
    return [job_view(doc) for doc in docs]


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
    current = await _get_doc(db, job_id)
    if current["state"] in TERMINAL:
        raise Conflict(f"job {job_id} is already {current['state']}", field="state")
    error = {"error": reason} if state == JobState.failed else {}
    doc = await update_then_read(
        db,
        {"_id": job_id, "state": current["state"], "attempt": current["attempt"]},
        {
            "$set": {"state": state.value, "updated_at": utcnow(), **error},
            "$push": {"history": history_entry(state, current["attempt"], reason=reason)},
        },
    )
    if doc is None:
        # It moved between the read and the update; judge it again on its new state.
        return await _end_job(db, job_id=job_id, state=state, reason=reason)
    await _cancel_parts(db, doc.get("parts") or [], reason=reason)
    if doc.get("part_of"):
        await settle_split(db, job_id=doc["part_of"])
    return job_view(doc)


async def _shards_owing(db: AsyncDatabase, job_id: str, parts: list[str], *, points: int) -> list[str]:
    """The shards of a sharded job (after the coordinator, parts[0]) whose records of some point never arrived."""
    delivered = await shard_points_store.delivered(db, job_id=job_id)
    return [part for k, part in enumerate(parts) if k > 0 and len(delivered.get(k, set())) < points]


async def _cancel_parts(db: AsyncDatabase, part_ids: list[str], *, reason: str) -> None:
    """Each part stops like any cancelled job (its follower learns on the next heartbeat); finished parts stay."""
    for part_id in part_ids:
        part = await db[COLLECTION].find_one({"_id": part_id}, {"state": 1})
        if part is not None and part["state"] not in TERMINAL:
            with contextlib.suppress(Conflict):  # it finished meanwhile
                await cancel_job(db, job_id=part_id, reason=reason)


async def update_then_read(db: AsyncDatabase, query: dict[str, Any], update: dict[str, Any]) -> dict[str, Any] | None:
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


async def claim_job(db: AsyncDatabase, *, job_id: str, claim: Claim) -> JobTask:
    """assigned → running for exactly this follower and attempt, once; Conflict otherwise."""
    doc = await update_then_read(
        db,
        {"_id": job_id, "state": JobState.assigned.value, "attempt": claim.attempt, "follower_id": claim.follower_id},
        {
            # dispatched: the follower holds the message, whatever the leader managed to record before.
            "$set": {"state": JobState.running.value, "dispatched": True, "updated_at": utcnow()},
            "$push": {"history": history_entry(JobState.running, claim.attempt, follower_id=claim.follower_id)},
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
                "$push": {"history": history_entry(JobState.running, 1, reason=f"part {job_id} started")},
            },
        )
    return job_task(doc)


def _stale_reason(doc: dict[str, Any], attempt: int, follower_id: str, *, wanted: str) -> str:
    if doc["attempt"] != attempt:
        return f"attempt {attempt} is stale: job {doc['_id']} is on attempt {doc['attempt']}"
    if doc.get("follower_id") != follower_id:
        return f"job {doc['_id']} attempt {attempt} is not held by follower {follower_id}"
    return f"job {doc['_id']} is {doc['state']}, not {wanted}"


async def running_attempt(db: AsyncDatabase, *, job_id: str, attempt: int, follower_id: str) -> JobView:
    """The job if this attempt is running on this follower; Conflict otherwise (reports of stale attempts are refused)."""
    doc = await _get_doc(db, job_id)
    if doc["state"] != JobState.running.value or doc["attempt"] != attempt or doc.get("follower_id") != follower_id:
        raise Conflict(_stale_reason(doc, attempt, follower_id, wanted="running"), field="attempt")
    return job_view(doc)


async def set_points_done(db: AsyncDatabase, *, job_id: str, attempt: int, points_done: int) -> None:
    """Record how many points of the attempt are stored (a count, so retried reports never inflate it)."""
    await db[COLLECTION].update_one(
        {"_id": job_id, "attempt": attempt}, {"$set": {"points_done": points_done, "updated_at": utcnow()}}
    )


async def finish_job(db: AsyncDatabase, *, job_id: str, report: FinishReport) -> JobView:
    """running → succeeded/failed for this attempt; repeating the same finish is a no-op, anything else a Conflict."""
    state = JobState(report.state)
    now = utcnow()
    # The actual run time goes into the same write as the final state, so no reader sees one without the other.
    before = await db[COLLECTION].find_one({"_id": job_id}, {"history": 1})
    history = (before or {}).get("history", [])
    started = [h["at"] for h in history if h["state"] == JobState.running.value and h["attempt"] == report.attempt]
    actual_s = None
    if state == JobState.succeeded:
        if report.elapsed_s is not None:
            actual_s = round(report.elapsed_s, 3)
        elif started and (wall_s := (now - as_utc(started[-1])).total_seconds()) >= 0:
            actual_s = round(wall_s, 3)  # an older agent: the leader's wall clock (a step back would make it negative)
    doc = await update_then_read(
        db,
        {"_id": job_id, "state": JobState.running.value, "attempt": report.attempt, "follower_id": report.follower_id},
        {
            "$set": {"state": state.value, "error": report.error, "updated_at": now, "actual_s": actual_s},
            "$push": {"history": history_entry(state, report.attempt, reason=report.error, follower_id=report.follower_id)},
        },
    )
    if doc is not None:
        if actual_s is not None:
            await _record_actual(doc, report, actual_s, db)
        if (doc.get("shard") or {}).get("index") == 0:
            # The coordinator is done: a shard that never delivered its records has nothing left to drive (a lost one
            # may still wait) and is cancelled; one that delivered them reports its own share and finishes by itself.
            parent = await db[COLLECTION].find_one({"_id": doc["part_of"]}, {"parts": 1})
            owing = await _shards_owing(db, doc["part_of"], (parent or {}).get("parts", []), points=len(doc["points"]))
            await _cancel_parts(db, owing, reason=f"shard 0 (the coordinator) {state.value}")
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


async def settle_split(db: AsyncDatabase, *, job_id: str) -> None:
    """Finish a split job once every part has: succeeded if all did, else failed naming the parts that did not.

    Idempotent (the final write is conditional on the split job not being finished), so two parts finishing at
    once, or a retried finish report, settle it exactly once.
    """
    doc = await db[COLLECTION].find_one({"_id": job_id}, {"parts": 1, "state": 1, "points_total": 1, "shards": 1})
    if doc is None or doc["state"] in TERMINAL or not doc.get("parts"):
        return
    parts = await db[COLLECTION].find({"_id": {"$in": doc["parts"]}}, {"state": 1, "points_done": 1, "error": 1}).to_list(None)
    if len(parts) < len(doc["parts"]) or any(p["state"] not in TERMINAL for p in parts):
        return
    bad = [p for p in parts if p["state"] != JobState.succeeded.value]
    if doc.get("shards"):
        # A sharded job is its coordinator's points: it ends as shard 0 did (a lost shard made points invalid).
        parts = [p for p in parts if p["_id"] == doc["parts"][0]]
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
            "$push": {"history": history_entry(state, 1, reason=error or f"all {len(parts)} parts {state.value}")},
        },
    )


async def _record_actual(doc: dict[str, Any], report: FinishReport, actual_s: float, db: AsyncDatabase) -> None:
    """Feed the estimator's history with the attempt's measured run time against its spec estimate."""
    await durations_store.record(
        db,
        model_ref=doc["model_ref"],
        backends=durations_store.backends_key(doc["spec"]["backends"]),
        follower_id=report.follower_id,
        estimate_s=doc["base_estimate_s"],
        actual_s=actual_s,
        measured_s=doc["measured_s"],
        follower_class=await followers_store.class_of(db, follower_id=report.follower_id),
    )


async def stale_held(db: AsyncDatabase, *, follower_id: str, held: list[tuple[str, int]]) -> list[str]:
    """Of the (job, attempt) pairs a follower holds, those the leader no longer wants it to run (cancelled, requeued)."""
    if not held:
        return []
    query = {"_id": {"$in": [job_id for job_id, _ in held]}}
    docs = await db[COLLECTION].find(query, {"state": 1, "attempt": 1, "follower_id": 1}).to_list(None)
    wanted = {(d["_id"], d["attempt"]) for d in docs if d["state"] in ACTIVE_STATES and d.get("follower_id") == follower_id}
    return sorted({job_id for job_id, attempt in held if (job_id, attempt) not in wanted})


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
