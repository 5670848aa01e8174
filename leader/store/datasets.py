"""Request-data sets: metadata documents in `datasets`, bytes in the GridFS bucket `data`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gridfs import AsyncGridFSBucket
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import NotFound
from common.formats.datasets import DataSetMeta
from leader.store.gridfs_files import read_chunks, store_then_publish
from leader.store.lookup import by_id, team_query

COLLECTION = "datasets"
BUCKET = "data"


def bucket_for(db: AsyncDatabase) -> AsyncGridFSBucket:
    """The GridFS bucket holding data-set files."""
    return AsyncGridFSBucket(db, bucket_name=BUCKET)


def _meta(doc: dict[str, Any]) -> DataSetMeta:
    return DataSetMeta.model_validate({k: v for k, v in doc.items() if k not in ("_id", "gridfs_id")})


async def insert_stream(db: AsyncDatabase, *, meta: DataSetMeta, chunks: AsyncIterator[bytes]) -> DataSetMeta:
    """Bytes to GridFS chunk by chunk, then the metadata (what makes the set visible); a failure leaves nothing behind."""
    await store_then_publish(
        db,
        bucket_for(db),
        filename=meta.id,
        sha256=meta.sha256,
        size_bytes=meta.size_bytes,
        chunks=chunks,
        collection=COLLECTION,
        doc={"_id": meta.id, **meta.model_dump()},
        what=f"data set {meta.id}",
    )
    return meta


async def _doc(db: AsyncDatabase, data_id: str, team: str | None, field: str = "id") -> dict[str, Any]:
    return await by_id(db, COLLECTION, data_id, what="data set", team=team, field=field)


async def get(db: AsyncDatabase, *, data_id: str, team: str | None = None, field: str = "id") -> DataSetMeta:
    """One data set's metadata (of `team`, when given); NotFound naming `field`."""
    return _meta(await _doc(db, data_id, team, field))


async def list_all(db: AsyncDatabase, *, team: str | None = None) -> list[DataSetMeta]:
    """Every data set (of `team`, when given), newest first."""
    return [_meta(d) for d in await db[COLLECTION].find(team_query(team)).sort([("created_at", -1)]).to_list(None)]


async def open_file(db: AsyncDatabase, *, data_id: str, team: str | None = None) -> tuple[DataSetMeta, AsyncIterator[bytes]]:
    """The metadata (of `team`, when given) and an iterator over the bytes, read from GridFS chunk by chunk."""
    doc = await _doc(db, data_id, team)
    return _meta(doc), await read_chunks(bucket_for(db), doc["gridfs_id"])


async def delete(db: AsyncDatabase, *, data_id: str) -> None:
    """Metadata first (the set disappears at once), then its file."""
    doc = await db[COLLECTION].find_one_and_delete({"_id": data_id})
    if doc is None:
        raise NotFound(f"data set {data_id} does not exist", field="id")
    await bucket_for(db).delete(doc["gridfs_id"])
