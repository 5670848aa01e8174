"""Raw per-request records: one compressed columnar blob (npz) per point and attempt, in the GridFS bucket `records`."""

from __future__ import annotations

from gridfs import AsyncGridFSBucket
from pymongo.asynchronous.database import AsyncDatabase

BUCKET = "records"


def _bucket(db: AsyncDatabase) -> AsyncGridFSBucket:
    return AsyncGridFSBucket(db, bucket_name=BUCKET)


def _filename(job_id: str, attempt: int, index: int) -> str:
    return f"{job_id}/{attempt}/{index}.npz"


async def save_records(db: AsyncDatabase, *, job_id: str, attempt: int, index: int, data: bytes) -> None:
    """Store a point's records blob, replacing any earlier upload of the same point and attempt (idempotent)."""
    bucket = _bucket(db)
    query = {"metadata.job_id": job_id, "metadata.attempt": attempt, "metadata.index": index}
    old = [doc["_id"] async for doc in db[f"{BUCKET}.files"].find(query, {"_id": 1})]
    # Upload first, delete after: a reader never finds the point without records mid-replace.
    await bucket.upload_from_stream(
        _filename(job_id, attempt, index), data, metadata={"job_id": job_id, "attempt": attempt, "index": index}
    )
    for file_id in old:
        await bucket.delete(file_id)


async def load_records(db: AsyncDatabase, *, job_id: str, attempt: int, index: int) -> bytes | None:
    """A point's records blob (npz bytes), or None when none was uploaded."""
    query = {"metadata.job_id": job_id, "metadata.attempt": attempt, "metadata.index": index}
    doc = await db[f"{BUCKET}.files"].find_one(query, sort=[("uploadDate", -1)])
    if doc is None:
        return None
    stream = await _bucket(db).open_download_stream(doc["_id"])
    return await stream.read()
