"""Reading one document by its id, the way every store reports a missing one."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.errors import NotFound


async def by_id(db: AsyncDatabase, collection: str, doc_id: str, *, what: str, field: str = "id") -> dict[str, Any]:
    """The document with this _id; NotFound naming `field` ("{what} {doc_id} does not exist") otherwise."""
    doc = await db[collection].find_one({"_id": doc_id})
    if doc is None:
        raise NotFound(f"{what} {doc_id} does not exist", field=field)
    return doc
