"""A job's data, everywhere PerfDB keeps it: measured (its footprint) and deleted. A job's data is its document and its
parts', their point results, leaderboard rows, raw records (GridFS files and chunks), live progress, and a sharded
job's barrier documents and shard records. The audit trail keeps its entries (the deletion among them), fleet checks
their figures, the model repository its models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import bson
from pymongo.asynchronous.database import AsyncDatabase

from common.wire.jobs import JobFootprint, Stored
from leader.store import imports as imports_store
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import progress as progress_store
from leader.store import records as records_store
from leader.store import results as results_store
from leader.store import shard_points as shard_points_store

FILES, CHUNKS = f"{records_store.BUCKET}.files", f"{records_store.BUCKET}.chunks"
# A GridFS file's bytes are its chunks: each bucket's files collection and its chunks collection.
CHUNKS_OF = {FILES: CHUNKS, imports_store.FILES: imports_store.CHUNKS}


@dataclass(frozen=True)
class Kind:
    name: str
    collection: str
    query: dict[str, Any]


def _kinds(job_ids: list[str], point_ids: list[str]) -> list[Kind]:
    """Each kind of a job's data, as (collection, query): raw-record chunks are found through their files."""
    ids = {"$in": job_ids}
    return [
        Kind("job", jobs_store.COLLECTION, {"_id": ids}),
        Kind("results", results_store.COLLECTION, {"job_id": ids}),
        Kind("leaderboard rows", leaderboard_store.COLLECTION, {"job_id": ids}),
        Kind("progress", progress_store.COLLECTION, {"_id": ids}),
        Kind("raw records", FILES, {"metadata.job_id": ids}),
        Kind("imported files", imports_store.FILES, {"metadata.job_id": ids}),
        Kind("shard barrier", shard_points_store.POINTS, {"_id": {"$in": point_ids}}),
        Kind("shard records", shard_points_store.RECORDS, {"job_id": ids}),
    ]


async def _family(db: AsyncDatabase, job_id: str) -> tuple[list[str], list[str]]:
    """The job's id and its parts', and its and its parts' point ids (the shard barrier's keys)."""
    docs = (
        await db[jobs_store.COLLECTION].find({"$or": [{"_id": job_id}, {"part_of": job_id}]}, {"points_total": 1}).to_list(None)
    )
    job_ids = [d["_id"] for d in docs]
    points = [f"{d['_id']}:{i}" for d in docs for i in range(int(d.get("points_total") or 0))]
    return job_ids, points


async def _sizes(cursor: AsyncIterator[dict[str, Any]]) -> tuple[int, int, list[Any]]:
    count = size = 0
    ids: list[Any] = []
    async for doc in cursor:
        count += 1
        size += len(bson.encode(doc))
        ids.append(doc["_id"])
    return count, size, ids


async def delete_records(db: AsyncDatabase, *, job_ids: list[str]) -> Stored:
    """Remove the jobs' raw records (files and chunks); what they held."""
    count, _, ids = await _sizes(db[FILES].find({"metadata.job_id": {"$in": job_ids}}))
    _, size, chunk_ids = await _sizes(db[CHUNKS].find({"files_id": {"$in": ids}}))
    # The files first: a reader then finds no file rather than a file without its chunks (chunks a crash leaves
    # behind are the orphan sweep's).
    await db[FILES].delete_many({"_id": {"$in": ids}})
    await db[CHUNKS].delete_many({"_id": {"$in": chunk_ids}})
    return Stored(documents=count, bytes=size)


async def footprint(db: AsyncDatabase, *, job_id: str, delete: bool = False) -> JobFootprint:
    """What the job's data holds, kind by kind; with `delete`, removed as it is counted (the job's own document last,
    so a deletion stopped half-way is finished by deleting again)."""
    job_ids, point_ids = await _family(db, job_id)
    kinds: dict[str, Stored] = {}
    for kind in sorted(_kinds(job_ids, point_ids), key=lambda k: k.name == "job"):
        count, size, ids = await _sizes(db[kind.collection].find(kind.query))
        chunk_ids: list[Any] = []
        chunks = CHUNKS_OF.get(kind.collection)
        if chunks is not None:  # a file's bytes are its chunks
            _, size, chunk_ids = await _sizes(db[chunks].find({"files_id": {"$in": ids}}))
        if delete and kind.collection == leaderboard_store.COLLECTION:  # rows leave their counts and best with them
            await leaderboard_store.delete_rows(db, row_ids=ids)
        elif delete:  # a file before its chunks: a reader finds no file rather than a file without its chunks
            await db[kind.collection].delete_many({"_id": {"$in": ids}})
            if chunk_ids and chunks is not None:
                await db[chunks].delete_many({"_id": {"$in": chunk_ids}})
        kinds[kind.name] = Stored(documents=count, bytes=size)
    if delete:
        await jobs_store.mark_deleted(db, job_ids=job_ids)
    return JobFootprint(job_id=job_id, job_ids=job_ids, deleted=delete, kinds=kinds)
