"""The audit log in PerfDB: who changed what, when, and with what answer (never a secret: paths and names only)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import DESCENDING
from pymongo.asynchronous.database import AsyncDatabase

from leader.clock import as_utc

COLLECTION = "audit"


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Newest first, by user too."""
    await db[COLLECTION].create_index([("at", DESCENDING), ("_id", DESCENDING)])
    await db[COLLECTION].create_index([("user", 1), ("at", DESCENDING)])


async def record(db: AsyncDatabase, entry: dict[str, Any]) -> None:
    """Append one entry (its `_id` sorts entries of the same millisecond)."""
    await db[COLLECTION].insert_one(entry)


async def entries(db: AsyncDatabase, *, user: str | None, limit: int, after: tuple[datetime, str] | None) -> list[dict[str, Any]]:
    """Entries newest first, optionally of one user; with `after` (at, id), those that come after it."""
    query: dict[str, Any] = {"user": user} if user is not None else {}
    if after is not None:
        at, entry_id = after
        query["$or"] = [{"at": {"$lt": at}}, {"at": at, "_id": {"$lt": entry_id}}]
    docs = await db[COLLECTION].find(query).sort([("at", DESCENDING), ("_id", DESCENDING)]).limit(limit).to_list(limit)
    return [{**doc, "id": doc.pop("_id"), "at": as_utc(doc["at"])} for doc in docs]
