"""Fleet checks in PerfDB: one document per check (its pinned jobs, and once settled its result and figures), and the
anomaly mark on a follower. The check itself (who runs it, the tests, the marks) is leader/jobs/fleetcheck.py."""

from __future__ import annotations

from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from common.wire.analysis import Anomaly
from leader.store import followers as followers_store

COLLECTION = "fleet_checks"


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Settling reads a model's earlier done checks, newest first."""
    await db[COLLECTION].create_index([("model_ref", 1), ("state", 1), ("created_at", -1)])


async def insert(db: AsyncDatabase, doc: dict[str, Any]) -> None:
    """Store a new check (acknowledged before returning)."""
    await db[COLLECTION].insert_one(doc)


async def find(db: AsyncDatabase, check_id: str, *, running: bool = False) -> dict[str, Any] | None:
    """A check's document (only while it runs, with `running`), None if there is none."""
    return await db[COLLECTION].find_one({"_id": check_id, **({"state": "running"} if running else {})})


async def earlier_figures(db: AsyncDatabase, *, model_ref: str, before: str, limit: int) -> list[list[list[Any]]]:
    """The figures ([follower, key, value] rows) of the model's last `limit` settled checks other than `before`,
    oldest first."""
    docs = (
        db[COLLECTION]
        .find({"state": "done", "model_ref": model_ref, "_id": {"$ne": before}}, {"figures": 1})
        .sort("created_at", -1)
        .limit(limit)
    )
    return [doc.get("figures") or [] async for doc in docs][::-1]


async def settle(db: AsyncDatabase, check_id: str, *, result: dict[str, Any], figures: list[list[Any]]) -> dict[str, Any] | None:
    """Mark a running check done with its result; None when another caller settled it first."""
    return await db[COLLECTION].find_one_and_update(
        {"_id": check_id, "state": "running"},
        {"$set": {"state": "done", "result": result, "figures": figures}},
        return_document=ReturnDocument.AFTER,
    )


async def set_recheck(db: AsyncDatabase, check_id: str, *, jobs: dict[str, str]) -> bool:
    """Record a running check's re-run jobs (follower id -> job id); False when it already has them."""
    done = await db[COLLECTION].update_one(
        {"_id": check_id, "state": "running", "recheck": {"$exists": False}}, {"$set": {"recheck": jobs}}
    )
    return done.modified_count == 1


async def set_anomaly(db: AsyncDatabase, *, follower_id: str, anomaly: Anomaly | None) -> None:
    """Mark a follower anomalous with the evidence, or clear its mark."""
    update = {"$set": {"anomaly": anomaly.model_dump()}} if anomaly is not None else {"$unset": {"anomaly": ""}}
    await db[followers_store.COLLECTION].update_one({"_id": follower_id}, update)


async def recent(db: AsyncDatabase, *, limit: int) -> list[dict[str, Any]]:
    """The last `limit` settled checks, newest first: id, when, model and figures ([follower, key, value] rows)."""
    fields = {"created_at": 1, "model_ref": 1, "figures": 1}
    return await db[COLLECTION].find({"state": "done"}, fields).sort("created_at", -1).limit(limit).to_list(limit)
