"""Read-only aggregates of PerfDB for the leader's Prometheus metrics."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.wire.jobs import JobState

JOBS = "jobs"
FOLLOWERS = "followers"
ACTIVE = [JobState.assigned.value, JobState.running.value]


async def queues_by_follower(db: AsyncDatabase) -> dict[str, tuple[int, float]]:
    """Per follower: (jobs assigned or running, their summed estimated seconds)."""
    pipeline: list[dict[str, Any]] = [
        {"$match": {"state": {"$in": ACTIVE}}},
        {"$group": {"_id": "$follower_id", "n": {"$sum": 1}, "s": {"$sum": "$estimate_s"}}},
    ]
    rows = await (await db[JOBS].aggregate(pipeline)).to_list(None)
    return {str(row["_id"]): (int(row["n"]), float(row["s"] or 0.0)) for row in rows if row["_id"] is not None}


async def followers_by_state(db: AsyncDatabase) -> dict[str, str]:
    """Every registered follower's id and liveness state (so an idle follower shows a queue of zero)."""
    docs = await db[FOLLOWERS].find({}, {"_id": 1, "state": 1}).to_list(None)
    return {str(doc["_id"]): str(doc.get("state", "unknown")) for doc in docs}


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


async def placements_since(db: AsyncDatabase, *, since: datetime, changed_since: datetime) -> list[tuple[datetime, float]]:
    """Each placement (queued → assigned) made after `since`, in the jobs changed since `changed_since`: (when it was
    assigned, seconds it waited in the queue)."""
    docs = await db[JOBS].find({"updated_at": {"$gte": changed_since}}, {"history": 1}).to_list(None)
    out: list[tuple[datetime, float]] = []
    for doc in docs:
        queued_at: datetime | None = None
        for entry in doc.get("history", []):
            at = _aware(entry["at"])
            if entry["state"] == JobState.queued.value:
                queued_at = at
            elif entry["state"] == JobState.assigned.value and queued_at is not None:
                if at > since:
                    out.append((at, max(0.0, (at - queued_at).total_seconds())))
                queued_at = None
    return out
