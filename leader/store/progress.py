"""Live progress: one bounded document per job with the latest windows of each point of its current attempt."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.wire.progress import MAX_WINDOWS_PER_POINT

COLLECTION = "progress"


async def save_windows(
    db: AsyncDatabase,
    *,
    job_id: str,
    attempt: int,
    follower_id: str,
    index: int,
    windows: list[dict[str, Any]],
    dropped: int = 0,
) -> None:
    """Replace a point's windows with the latest ones (the tail only); a newer attempt starts the document afresh."""
    now = datetime.now(UTC)
    # An earlier attempt's windows are not this attempt's progress.
    await db[COLLECTION].delete_one({"_id": job_id, "attempt": {"$lt": attempt}})
    await db[COLLECTION].update_one(
        {"_id": job_id},
        {
            "$set": {
                f"points.{index}": {"index": index, "windows": windows[-MAX_WINDOWS_PER_POINT:], "updated_at": now},
                "attempt": attempt,
                "follower_id": follower_id,
                "updated_at": now,
                "dropped": dropped,
            }
        },
        upsert=True,
    )


async def get_progress(db: AsyncDatabase, *, job_id: str) -> dict[str, Any] | None:
    """The job's progress document, or None before its first window."""
    return await db[COLLECTION].find_one({"_id": job_id})
