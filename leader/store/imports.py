"""Imported runs in PerfDB: the raw files in their own GridFS bucket (kept with the job, never expired by retention),
the point results and leaderboard rows, then the job document that makes it visible; a failure at any step removes
what was written, so an import never half-writes."""

from __future__ import annotations

import asyncio
from typing import Any

from bson import ObjectId
from gridfs import AsyncGridFSBucket
from gridfs.errors import NoFile
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import NotFound
from common.wire.results import PointResult
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import results as results_store

BUCKET = "imported"
FILES, CHUNKS = f"{BUCKET}.files", f"{BUCKET}.chunks"


def bucket_for(db: AsyncDatabase) -> AsyncGridFSBucket:
    return AsyncGridFSBucket(db, bucket_name=BUCKET)


async def insert_import(db: AsyncDatabase, *, doc: dict[str, Any], results: list[PointResult], files: dict[str, bytes]) -> None:
    """Store an imported job whole, or nothing of it."""
    job_id = doc["_id"]
    bucket = bucket_for(db)
    try:
        for name, data in files.items():
            await bucket.upload_from_stream(name, data, metadata={"job_id": job_id, "name": name})
        for result in results:
            # The row is written here, not by the job's document (which comes last, to make the import visible).
            stored = await results_store.store_point(db, job_id=job_id, attempt=1, result=result)
            row = leaderboard_store.row_from_result(
                job_id=job_id,
                job_name=doc["name"],
                model=doc["model_ref"],
                team=doc["team"],
                slo_p99_ms=None,
                attempt=1,
                result=stored,
            )
            await leaderboard_store.write_row(db, row)
        await db[jobs_store.COLLECTION].insert_one(doc)
    except BaseException:
        # Shielded: a cancelled request (client gone) must still remove what it wrote.
        await asyncio.shield(_remove(db, job_id))
        raise


async def collect_orphans(db: AsyncDatabase, *, cutoff: ObjectId) -> int:
    """What an import a crash interrupted left before `cutoff` (its files stored, its job's document never): its files,
    results and rows; how many imports."""
    published = set(await db[jobs_store.COLLECTION].distinct("_id"))
    stray = {doc["metadata"]["job_id"] async for doc in db[FILES].find({"_id": {"$lt": cutoff}}, {"metadata.job_id": 1})}
    stray -= published
    for job_id in stray:
        await _remove(db, job_id)
    return len(stray)


async def _remove(db: AsyncDatabase, job_id: str) -> None:
    rows = [d["_id"] async for d in leaderboard_store.find_rows(db, {"job_id": job_id}, {"_id": 1})]
    await leaderboard_store.delete_rows(db, row_ids=rows)
    await db[results_store.COLLECTION].delete_many({"job_id": job_id})
    bucket = bucket_for(db)
    async for f in db[FILES].find({"metadata.job_id": job_id}, {"_id": 1}):
        await bucket.delete(f["_id"])


async def read_file(db: AsyncDatabase, *, job_id: str, name: str) -> bytes:
    """One raw file kept with an imported job; NotFound naming `name`."""
    doc = await db[FILES].find_one({"metadata.job_id": job_id, "metadata.name": name})
    if doc is None:
        raise NotFound(f"job {job_id} keeps no imported file {name!r}", field="name")
    try:
        stream = await bucket_for(db).open_download_stream(doc["_id"])
    except NoFile:
        raise NotFound(f"job {job_id} keeps no imported file {name!r}", field="name") from None
    return await stream.read()
