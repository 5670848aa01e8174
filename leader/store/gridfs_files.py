"""Store a file in GridFS, then publish the document that makes it visible; a failure at any step leaves nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from gridfs import AsyncGridFSBucket
from pymongo.asynchronous.database import AsyncDatabase

# GridFS ids of the uploads this leader is streaming now: the orphan sweep (leader/store/orphans.py) leaves them alone.
IN_PROGRESS: set[Any] = set()


async def store_then_publish(
    db: AsyncDatabase,
    bucket: AsyncGridFSBucket,
    *,
    filename: str,
    sha256: str,
    size_bytes: int,
    chunks: AsyncIterator[bytes],
    collection: str,
    doc: dict[str, Any],
    what: str,
) -> None:
    """Write the chunks, check the size, then insert `doc` (plus its GridFS id) into `collection`.

    The document is what makes the file visible, so nothing is ever seen half-stored: an upload that breaks
    (cancelled, a short source, a database error) aborts the GridFS file, which deletes the chunks already written,
    and a refused insert (e.g. a duplicate key, re-raised for the caller) deletes the stored file.
    """
    grid_in = bucket.open_upload_stream(filename, metadata={"sha256": sha256})
    IN_PROGRESS.add(grid_in._id)
    size = 0
    try:
        async for chunk in chunks:
            size += len(chunk)
            await grid_in.write(chunk)
        if size != size_bytes:
            raise ValueError(f"{what}: {size} bytes streamed, {size_bytes} expected")
        await grid_in.close()
    except BaseException:
        IN_PROGRESS.discard(grid_in._id)
        # Shielded: a cancelled request (client gone) must still remove what it wrote.
        await asyncio.shield(grid_in.abort())
        raise
    try:
        await db[collection].insert_one({**doc, "gridfs_id": grid_in._id})
    except BaseException:
        await asyncio.shield(bucket.delete(grid_in._id))
        raise
    finally:
        IN_PROGRESS.discard(grid_in._id)


async def read_chunks(bucket: AsyncGridFSBucket, gridfs_id: Any) -> AsyncIterator[bytes]:
    """A stored file's bytes, chunk by chunk as GridFS holds them. The file is opened now (a missing one fails here,
    not mid-response); the stream is closed however the reader stops."""
    stream = await bucket.open_download_stream(gridfs_id)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await stream.readchunk():
                yield chunk
        finally:
            await stream.close()

    return chunks()
