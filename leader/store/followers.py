"""Followers in PerfDB: one document per follower_id with its latest registration, heartbeat and liveness state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from motor.motor_asyncio import AsyncIOMotorDatabase
from pymongo import ReturnDocument

from common.followers import FollowerInfo, FollowerView, Heartbeat
from leader.clock import as_utc, utcnow
from leader.domain import Candidate

COLLECTION = "followers"
MISSING = "missing"


async def ensure_indexes(db: AsyncIOMotorDatabase) -> None:
    """The monitor scans by state and last heartbeat."""
    await db[COLLECTION].create_index([("state", 1), ("last_seen", 1)])


def follower_view(doc: dict[str, Any]) -> FollowerView:
    """A stored follower document as the API shows it."""
    return FollowerView(
        info=FollowerInfo.model_validate(doc["info"]),
        state=doc["state"],
        last_seen=as_utc(doc["last_seen"]),
        registered_at=as_utc(doc["registered_at"]),
        running_job=doc.get("running_job"),
    )


async def register(db: AsyncIOMotorDatabase, *, info: FollowerInfo) -> tuple[FollowerView, str | None]:
    """Create or refresh the follower as ready; returns its view and the incarnation it had before (None if new)."""
    now = utcnow()
    before = await db[COLLECTION].find_one_and_update(
        {"_id": info.follower_id},
        {
            "$set": {
                "info": info.model_dump(),
                "incarnation": info.incarnation,
                "state": "ready",
                "last_seen": now,
                "registered_at": now,
                "running_job": None,
            }
        },
        upsert=True,
        return_document=ReturnDocument.BEFORE,
    )
    view = FollowerView(info=info, state="ready", last_seen=now, registered_at=now, running_job=None)
    return view, (before["incarnation"] if before is not None else None)


async def heartbeat(db: AsyncIOMotorDatabase, *, follower_id: str, beat: Heartbeat) -> bool:
    """Record a heartbeat of the registered incarnation (a missing follower comes back); False if unknown."""
    result = await db[COLLECTION].update_one(
        {"_id": follower_id, "incarnation": beat.incarnation},
        {"$set": {"state": beat.state, "running_job": beat.running_job, "last_seen": utcnow()}},
    )
    return result.matched_count > 0


async def incarnation_of(db: AsyncIOMotorDatabase, *, follower_id: str) -> str | None:
    """The registered incarnation of a follower, None if unknown."""
    doc = await db[COLLECTION].find_one({"_id": follower_id}, {"incarnation": 1})
    return doc["incarnation"] if doc is not None else None


async def list_followers(db: AsyncIOMotorDatabase) -> list[FollowerView]:
    """Every follower ever registered, by id."""
    docs = await db[COLLECTION].find({}).sort("_id", 1).to_list(None)
    return [follower_view(doc) for doc in docs]


async def candidates(db: AsyncIOMotorDatabase) -> list[Candidate]:
    """Followers that may take work (not missing) with their backends."""
    docs = await db[COLLECTION].find({"state": {"$ne": MISSING}}, {"info.backends": 1}).to_list(None)
    return [Candidate(doc["_id"], frozenset(doc["info"]["backends"])) for doc in docs]


async def mark_missing(db: AsyncIOMotorDatabase, *, seen_before: datetime) -> list[str]:
    """Followers not heard from since `seen_before` become missing; returns the ones that just did."""
    stale = await db[COLLECTION].find({"state": {"$ne": MISSING}, "last_seen": {"$lt": seen_before}}, {"_id": 1}).to_list(None)
    marked = []
    for doc in stale:
        # The same condition again: a heartbeat that lands in between keeps the follower alive.
        result = await db[COLLECTION].update_one(
            {"_id": doc["_id"], "state": {"$ne": MISSING}, "last_seen": {"$lt": seen_before}}, {"$set": {"state": MISSING}}
        )
        if result.modified_count:
            marked.append(doc["_id"])
    return marked


async def missing_ids(db: AsyncIOMotorDatabase) -> list[str]:
    """Ids of the followers currently missing."""
    docs = await db[COLLECTION].find({"state": MISSING}, {"_id": 1}).to_list(None)
    return [doc["_id"] for doc in docs]
