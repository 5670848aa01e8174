"""Raw per-request records: one compressed columnar blob (npz) per point and attempt, in the GridFS bucket `records`;
a search point has one more per probe (`probe`: its place in the answer's probes), the point's own being the chosen
probe's."""

from __future__ import annotations

from gridfs import AsyncGridFSBucket
from gridfs.errors import CorruptGridFile, NoFile
from pymongo.asynchronous.database import AsyncDatabase

BUCKET = "records"
MAX_PROBE = 40  # a search's probes a blob may belong to: it runs at most 20 (SearchSpec.max_steps), room to spare


def _bucket(db: AsyncDatabase) -> AsyncGridFSBucket:
    return AsyncGridFSBucket(db, bucket_name=BUCKET)


def _filename(job_id: str, attempt: int, index: int, probe: int | None) -> str:
    return f"{job_id}/{attempt}/{index}.npz" if probe is None else f"{job_id}/{attempt}/{index}/probe-{probe}.npz"


async def save_records(
    db: AsyncDatabase, *, job_id: str, attempt: int, index: int, data: bytes, probe: int | None = None
) -> None:
    """Store a point's (or one of its probes') records blob, replacing any earlier upload of it (idempotent)."""
    bucket = _bucket(db)
    query = {"metadata.job_id": job_id, "metadata.attempt": attempt, "metadata.index": index, "metadata.probe": probe}
    old = [doc["_id"] async for doc in db[f"{BUCKET}.files"].find(query, {"_id": 1})]
    # Upload first, delete after: a reader never finds the point without records mid-replace.
    await bucket.upload_from_stream(
        _filename(job_id, attempt, index, probe),
        data,
        metadata={"job_id": job_id, "attempt": attempt, "index": index, "probe": probe},
    )
    for file_id in old:
        await bucket.delete(file_id)


async def load_records(db: AsyncDatabase, *, job_id: str, attempt: int, index: int, probe: int | None = None) -> bytes | None:
    """A point's (or one of its probes') records blob (npz bytes), or None when none was uploaded."""
    # A blob stored before probes existed has no `probe`: null matches it as the point's own.
    query = {"metadata.job_id": job_id, "metadata.attempt": attempt, "metadata.index": index, "metadata.probe": probe}
    doc = await db[f"{BUCKET}.files"].find_one(query, sort=[("uploadDate", -1)])
    if doc is None:
        return None
    try:
        stream = await _bucket(db).open_download_stream(doc["_id"])
        return await stream.read()
    except (NoFile, CorruptGridFile):  # deleted while read (a job's deletion, retention): as good as never uploaded
        return None
