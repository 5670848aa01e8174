"""Orphaned GridFS data after a crash mid-upload: chunks whose file was never closed (the leader died while a model or
data set streamed in), and stored files that no document publishes (it died between storing and publishing).

Collected at the leader's start and every SWEEP_S, once they are older than GRACE: a GridFS id is an ObjectId, which
carries its creation time, so an upload still streaming is never touched (this leader's own uploads in progress are
skipped whatever their age, see gridfs_files.IN_PROGRESS).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from bson import ObjectId
from gridfs import AsyncGridFSBucket
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from leader.clock import utcnow
from leader.store import datasets, imports, models, records
from leader.store.gridfs_files import IN_PROGRESS

log = logging.getLogger(__name__)

GRACE = timedelta(hours=1)
SWEEP_S = 600.0
# GridFS bucket -> the collection whose documents publish its files (by `gridfs_id`); None: its files publish themselves.
# An import's files are published by its job's document (imports.collect_orphans).
PUBLISHED: dict[str, str | None] = {
    models.BUCKET: models.COLLECTION,
    datasets.BUCKET: datasets.COLLECTION,
    records.BUCKET: None,
    imports.BUCKET: None,
}


async def collect_orphans(db: AsyncDatabase, *, older_than: datetime) -> dict[str, int]:
    """Remove what crashed uploads left behind before `older_than`; per bucket, how many chunks and files went."""
    cutoff = ObjectId.from_datetime(older_than)
    removed: dict[str, int] = {}
    for bucket, collection in PUBLISHED.items():
        files, chunks = db[f"{bucket}.files"], db[f"{bucket}.chunks"]
        with_file = set(await files.distinct("_id"))
        stray = [
            i
            for i in await chunks.distinct("files_id", {"files_id": {"$lt": cutoff}})
            if i not in with_file and i not in IN_PROGRESS
        ]
        count = (await chunks.delete_many({"files_id": {"$in": stray}})).deleted_count if stray else 0
        if collection is not None:
            published = set(await db[collection].distinct("gridfs_id"))
            unpublished = [
                doc["_id"]
                async for doc in files.find({"_id": {"$lt": cutoff}}, {"_id": 1})
                if doc["_id"] not in published and doc["_id"] not in IN_PROGRESS
            ]
            for file_id in unpublished:
                await AsyncGridFSBucket(db, bucket_name=bucket).delete(file_id)
            count += len(unpublished)
        if bucket == imports.BUCKET:
            count += await imports.collect_orphans(db, cutoff=cutoff)
        if count:
            log.warning("removed %d orphaned GridFS chunks/files of bucket %s (uploads a crash interrupted)", count, bucket)
        removed[bucket] = count
    return removed


async def sweep(db: AsyncDatabase) -> None:
    """At start and every SWEEP_S: collect what is older than GRACE (a database outage only skips a round)."""
    while True:
        try:
            await collect_orphans(db, older_than=utcnow() - GRACE)
        except PyMongoError as exc:
            log.warning("orphan sweep skipped: %s", type(exc).__name__)
        await asyncio.sleep(SWEEP_S)
