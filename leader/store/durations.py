"""The duration estimator's history: per model / backends / follower, how actual run times compare with estimates."""

from __future__ import annotations

from motor.motor_asyncio import AsyncIOMotorDatabase

from leader.clock import utcnow

COLLECTION = "durations"
# Weight of the newest observation in the running correction factor (an exponential moving average).
ALPHA = 0.3
# A factor is clamped so one pathological run (a hung server, a clock jump) cannot make an estimate absurd.
MIN_FACTOR, MAX_FACTOR = 0.1, 10.0
ANY_FOLLOWER = "*"


def _id(model_ref: str, backends: str, follower_id: str) -> str:
    return f"{model_ref}|{backends}|{follower_id}"


async def ensure_indexes(db: AsyncIOMotorDatabase) -> None:
    """Documents are looked up by _id only."""


async def record(
    db: AsyncIOMotorDatabase, *, model_ref: str, backends: str, follower_id: str, estimate_s: float, actual_s: float
) -> None:
    """Fold one finished job's actual/estimate ratio into the follower's and the fleet-wide factor."""
    if estimate_s <= 0 or actual_s <= 0:
        return
    ratio = min(MAX_FACTOR, max(MIN_FACTOR, actual_s / estimate_s))
    for fid in (follower_id, ANY_FOLLOWER):
        key = _id(model_ref, backends, fid)
        doc = await db[COLLECTION].find_one({"_id": key})
        factor = ratio if doc is None else (1 - ALPHA) * doc["factor"] + ALPHA * ratio
        await db[COLLECTION].update_one(
            {"_id": key},
            {
                "$set": {"factor": factor, "last_estimate_s": estimate_s, "last_actual_s": actual_s, "updated_at": utcnow()},
                "$inc": {"count": 1, "abs_error_s": abs(actual_s - estimate_s)},
            },
            upsert=True,
        )


async def factor(db: AsyncIOMotorDatabase, *, model_ref: str, backends: str, follower_id: str) -> float:
    """The correction for this model/backends on this follower, else fleet-wide, else 1."""
    ids = [_id(model_ref, backends, follower_id), _id(model_ref, backends, ANY_FOLLOWER)]
    docs = await db[COLLECTION].find({"_id": {"$in": ids}}).to_list(2)
    by_id = {d["_id"]: d["factor"] for d in docs}
    return float(by_id.get(_id(model_ref, backends, follower_id), by_id.get(_id(model_ref, backends, ANY_FOLLOWER), 1.0)))
