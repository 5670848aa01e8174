"""The model repository: metadata documents in `models`, bytes in the GridFS bucket `models`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gridfs import AsyncGridFSBucket
from pymongo import DESCENDING, ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from common.errors import Conflict, NotFound
from common.wire.models import ModelMeta, ModelQuery, ModelUpdate, tidy_tags
from leader.clock import as_utc
from leader.store.gridfs_files import read_chunks, store_then_publish
from leader.store.lookup import team_query

COLLECTION = "models"
BUCKET = "models"
LATEST = "latest"


def bucket_for(db: AsyncDatabase) -> AsyncGridFSBucket:
    """The GridFS bucket holding model files."""
    return AsyncGridFSBucket(db, bucket_name=BUCKET)


async def ensure_indexes(db: AsyncDatabase) -> None:
    """`_id` is name:version (unique by construction); latest-version lookups sort by created_at."""
    await db[COLLECTION].create_index([("name", 1), ("created_at", DESCENDING)])


def _meta(doc: dict[str, Any]) -> ModelMeta:
    # Documents stored before `owner` existed lack it: the model's default applies.
    fields = {k: doc[k] for k in ModelMeta.model_fields if k in doc}
    fields["created_at"] = as_utc(fields["created_at"])
    return ModelMeta.model_validate(fields)


async def exists(db: AsyncDatabase, *, name: str, version: str) -> bool:
    """Whether name:version is already stored (checked before accepting a large upload)."""
    return await db[COLLECTION].count_documents({"_id": f"{name}:{version}"}, limit=1) > 0


async def insert_model_stream(db: AsyncDatabase, *, meta: ModelMeta, chunks: AsyncIterator[bytes]) -> ModelMeta:
    """Write the bytes to GridFS chunk by chunk, then the metadata; a failure leaves no chunk and no model (409 on duplicates)."""
    try:
        await store_then_publish(
            db,
            bucket_for(db),
            filename=meta.ref,
            sha256=meta.sha256,
            size_bytes=meta.size_bytes,
            chunks=chunks,
            collection=COLLECTION,
            doc={"_id": meta.ref, **meta.model_dump()},
            what=f"model {meta.ref}",
        )
    except DuplicateKeyError:
        raise Conflict(f"model {meta.ref} already exists", field="version") from None
    return meta


async def orphan_chunks(db: AsyncDatabase) -> int:
    """GridFS chunks of the model bucket whose file no model document names (0 unless an upload broke uncleanly)."""
    known = [doc["gridfs_id"] async for doc in db[COLLECTION].find({}, {"gridfs_id": 1})]
    return await db[f"{BUCKET}.chunks"].count_documents({"files_id": {"$nin": known}})


async def get_model(
    db: AsyncDatabase, *, name: str, version: str | None, field: str = "version", team: str | None = None
) -> ModelMeta:
    """name:version, or the newest version of name when version is None or `latest` (of `team`, when given: another
    team's model does not exist for it); NotFound naming `field`."""
    return _meta(await _get_doc(db, name=name, version=version, field=field, team=team))


async def _get_doc(db: AsyncDatabase, *, name: str, version: str | None, field: str, team: str | None = None) -> dict[str, Any]:
    scope = team_query(team)
    if version is None or version == LATEST:
        newest = [("created_at", DESCENDING), ("_id", DESCENDING)]
        docs = await db[COLLECTION].find({"name": name, **scope}).sort(newest).limit(1).to_list(1)
        doc = docs[0] if docs else None
        shown = f"{name} (latest)"
    else:
        doc = await db[COLLECTION].find_one({"_id": f"{name}:{version}", **scope})
        shown = f"{name}:{version}"
    if doc is None:
        raise NotFound(f"model {shown} does not exist", field=field)
    return doc


async def update_model(db: AsyncDatabase, *, name: str, version: str, changes: ModelUpdate) -> ModelMeta:
    """Set what `changes` gives (description, tags, trusted); NotFound naming `version`."""
    fields = changes.model_dump(exclude_none=True)
    if "tags" in fields:
        fields["tags"] = tidy_tags(fields["tags"])
    doc = await db[COLLECTION].find_one_and_update(
        {"_id": f"{name}:{version}"}, {"$set": fields}, return_document=ReturnDocument.AFTER
    )
    if doc is None:
        raise NotFound(f"model {name}:{version} does not exist", field="version")
    return _meta(doc)


async def list_models(db: AsyncDatabase, *, team: str | None = None, query: ModelQuery | None = None) -> list[ModelMeta]:
    """Every stored model (of `team`, when given) that `query` keeps, by name then newest first."""
    docs = await db[COLLECTION].find(team_query(team)).sort([("name", 1), ("created_at", DESCENDING)]).to_list(None)
    found = [_meta(doc) for doc in docs]
    return found if query is None else [m for m in found if query.keeps(m)]


async def open_model_file(
    db: AsyncDatabase, *, name: str, version: str, team: str | None = None
) -> tuple[ModelMeta, AsyncIterator[bytes]]:
    """The model's metadata (of `team`, when given) and an iterator over its bytes, read from GridFS chunk by chunk."""
    doc = await _get_doc(db, name=name, version=version, field="version", team=team)
    return _meta(doc), await read_chunks(bucket_for(db), doc["gridfs_id"])


async def delete_model(db: AsyncDatabase, *, name: str, version: str) -> None:
    """Remove the metadata first (the model disappears at once), then its file."""
    doc = await db[COLLECTION].find_one_and_delete({"_id": f"{name}:{version}"})
    if doc is None:
        raise NotFound(f"model {name}:{version} does not exist", field="version")
    await bucket_for(db).delete(doc["gridfs_id"])
