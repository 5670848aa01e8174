"""Point results in PerfDB: one document per (job, attempt, point index), so a retried report replaces, never duplicates."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase

from common.wire.jobs import JobView
from common.wire.results import PointResult
from leader.clock import as_utc
from leader.store import jobs as jobs_store
from leader.store import leaderboard

COLLECTION = "results"


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Results are read per job attempt in point order."""
    await db[COLLECTION].create_index([("job_id", ASCENDING), ("attempt", ASCENDING), ("index", ASCENDING)])


async def store_point(db: AsyncDatabase, *, job_id: str, attempt: int, result: PointResult) -> dict[str, Any]:
    """Store (or replace) one point result document, its leaderboard row aside; returns the result as stored."""
    index = result.point.index
    stored = result.model_dump()
    doc = {"job_id": job_id, "attempt": attempt, "index": index, "result": stored}
    await db[COLLECTION].replace_one({"_id": f"{job_id}:{attempt}:{index}"}, doc, upsert=True)
    return stored


async def save_point(db: AsyncDatabase, *, job_id: str, attempt: int, result: PointResult) -> int:
    """Store (or replace) one point result; returns how many points of the attempt are stored."""
    stored = await store_point(db, job_id=job_id, attempt=attempt, result=result)
    # The leaderboard keeps a flat row per point (the newest attempt's), read by the web pages and analysis API.
    await leaderboard.index_point(db, job_id=job_id, attempt=attempt, result=stored)
    return await db[COLLECTION].count_documents({"job_id": job_id, "attempt": attempt})


async def get_point(db: AsyncDatabase, *, job_id: str, attempt: int, index: int) -> PointResult | None:
    """One stored point of an attempt, None when it was not reported."""
    doc = await db[COLLECTION].find_one({"_id": f"{job_id}:{attempt}:{index}"})
    return _result(doc) if doc is not None else None


def _result(doc: dict[str, Any]) -> PointResult:
    result = doc["result"]
    result["started_at"] = as_utc(result["started_at"])
    return PointResult.model_validate(result)


async def attempt_points(db: AsyncDatabase, *, job_id: str, attempt: int) -> list[PointResult]:
    """The stored points of one attempt, by point index."""
    docs = await db[COLLECTION].find({"job_id": job_id, "attempt": attempt}).sort("index", ASCENDING).to_list(None)
    return [_result(doc) for doc in docs]


async def job_points(db: AsyncDatabase, job: JobView) -> list[PointResult]:
    """A job's points: its current attempt's, or a split job's parts' merged back (a sharded job's coordinator's)."""
    if job.parts:
        return await merged_points(db, parts=await jobs_store.part_attempts(db, job_id=job.id))
    return await attempt_points(db, job_id=job.id, attempt=job.attempt)


async def merged_points(db: AsyncDatabase, *, parts: list[tuple[str, int, int]]) -> list[PointResult]:
    """A split job's result: each part's current-attempt points, numbered back into the split job's grid."""
    out: list[PointResult] = []
    for part_id, attempt, start in parts:
        for result in await attempt_points(db, job_id=part_id, attempt=attempt):
            point = result.point.model_copy(update={"index": start + result.point.index})
            out.append(result.model_copy(update={"point": point}))
    return sorted(out, key=lambda r: r.point.index)
