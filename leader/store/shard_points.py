"""A sharded job's points in PerfDB: one document per (job, point) holds the shards' arrivals and the release (the
common start instant and who is in it); one per (job, point, shard) holds that shard's raw records (its coordinator
merges them; they stay, so anyone may check the merge). The barrier lives here, not in a leader's memory, so a leader
restart loses nothing of it."""

from __future__ import annotations

from typing import Any

from bson import Binary
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from common.errors import NotFound

POINTS = "shard_points"
RECORDS = "shard_records"

# The first shard at a point waits this long for the others, then the point starts with those present (the absent
# ones are named in it); a shard arriving after the start skips the point.
SHARD_WAIT_S = 60.0
# The common start is this far after the release: every shard's next poll (50 ms apart) sees it, and each measures
# its clock offset (sixteen round trips) before it.
START_LEAD_NS = 500_000_000


async def ensure_indexes(db: AsyncDatabase) -> None:
    """The coordinator reads a point's shard records by job and point."""
    await db[RECORDS].create_index([("job_id", 1), ("index", 1)])


def _point_id(job_id: str, index: int) -> str:
    return f"{job_id}:{index}"


async def arrive(
    db: AsyncDatabase,
    *,
    job_id: str,
    index: int,
    shard: int,
    count: int,
    attempt: int,
    follower_id: str,
    now_ns: int,
    wait_s: float = SHARD_WAIT_S,
) -> dict[str, Any]:
    """Record that a shard is ready for a point and release the point when every shard is (or the wait ran out);
    the point's document as it is now."""
    doc_id = _point_id(job_id, index)
    update = {
        "$setOnInsert": {"first_ns": now_ns, "count": count, "start_at_ns": None},
        "$set": {f"arrivals.{shard}": {"attempt": attempt, "follower_id": follower_id, "at_ns": now_ns}},
    }
    try:
        await db[POINTS].update_one({"_id": doc_id}, update, upsert=True)
    except DuplicateKeyError:  # two shards inserted it at once: it exists now, so this one updates
        await db[POINTS].update_one({"_id": doc_id}, update, upsert=True)
    doc = await db[POINTS].find_one({"_id": doc_id})
    assert doc is not None
    arrivals = doc.get("arrivals") or {}
    if doc.get("start_at_ns") is None and (len(arrivals) >= count or now_ns - doc["first_ns"] > wait_s * 1e9):
        # Conditional: of two shards releasing at once, one sets the start and both read it.
        await db[POINTS].update_one(
            {"_id": doc_id, "start_at_ns": None}, {"$set": {"start_at_ns": now_ns + START_LEAD_NS, "roster": arrivals}}
        )
        doc = await db[POINTS].find_one({"_id": doc_id})
        assert doc is not None
    return doc


async def point_doc(db: AsyncDatabase, *, job_id: str, index: int) -> dict[str, Any] | None:
    """The point's arrivals and release, if any shard reached it."""
    return await db[POINTS].find_one({"_id": _point_id(job_id, index)})


async def put_records(
    db: AsyncDatabase, *, job_id: str, index: int, shard: int, attempt: int, follower_id: str, blob: bytes, meta: dict[str, Any]
) -> None:
    """A shard's records of a point (replacing an earlier upload of the same shard)."""
    doc_id = f"{_point_id(job_id, index)}:{shard}"
    doc = {
        "_id": doc_id,
        "job_id": job_id,
        "index": index,
        "shard": shard,
        "attempt": attempt,
        "follower_id": follower_id,
        "blob": Binary(blob),
        "meta": meta,
    }
    await db[RECORDS].replace_one({"_id": doc_id}, doc, upsert=True)


async def uploaded(db: AsyncDatabase, *, job_id: str, index: int) -> dict[int, dict[str, Any]]:
    """Which shards' records of a point are stored: shard → (attempt, follower_id, meta), without the blobs."""
    docs = db[RECORDS].find({"job_id": job_id, "index": index}, {"blob": 0})
    return {int(d["shard"]): d async for d in docs}


async def get_records(db: AsyncDatabase, *, job_id: str, index: int, shard: int) -> bytes:
    """A shard's records blob of a point; NotFound naming the shard when none is stored."""
    doc = await db[RECORDS].find_one({"_id": f"{_point_id(job_id, index)}:{shard}"}, {"blob": 1})
    if doc is None:
        raise NotFound(f"shard {shard} stored no records of point {index}", field="shard")
    return bytes(doc["blob"])


async def delivered(db: AsyncDatabase, *, job_id: str) -> dict[int, set[int]]:
    """Which points each shard's records are stored for: shard → point indexes."""
    out: dict[int, set[int]] = {}
    async for d in db[RECORDS].find({"job_id": job_id}, {"shard": 1, "index": 1}):
        out.setdefault(int(d["shard"]), set()).add(int(d["index"]))
    return out
