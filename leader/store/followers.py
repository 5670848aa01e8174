"""Followers in PerfDB: one document per follower_id with its latest registration, heartbeat and liveness state."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from common.errors import NotFound
from common.spec.needs import offered_backends
from common.wire.compat import release_note
from common.wire.followers import FollowerInfo, FollowerView, Heartbeat
from leader.clock import as_utc, utcnow
from leader.domain import Candidate, Gpu, follower_class

COLLECTION = "followers"
Heard = Literal["unknown", "live", "returned"]
MISSING = "missing"
DRAINING = "draining"
PENDING = "pending"
# Followers that may be given work (placement, fleet checks) and read models and data: approved, heard, not draining.
_MAY_WORK = {"state": {"$ne": MISSING}, "draining": {"$ne": True}, "approved": True}


async def ensure_indexes(db: AsyncDatabase) -> None:
    """The monitor scans by state and last heartbeat."""
    await db[COLLECTION].create_index([("state", 1), ("last_seen", 1)])


def follower_view(doc: dict[str, Any]) -> FollowerView:
    """A stored follower document as the API shows it."""
    # Draining is an admin's flag on top of the heartbeat state, and pending (not approved) on top of that; missing wins
    # (a drained host can also die).
    state = doc["state"]
    if state != MISSING:
        state = PENDING if not doc.get("approved") else DRAINING if doc.get("draining") else state
    return FollowerView.model_validate(
        {
            "info": doc["info"],
            "state": state,
            "last_seen": as_utc(doc["last_seen"]),
            "registered_at": as_utc(doc["registered_at"]),
            "running_job": doc.get("running_job"),
            "held": doc.get("held") or [],
            "waiting_reason": doc.get("waiting_reason"),
            "anomaly": doc.get("anomaly"),
            "clock": doc.get("clock") or doc["info"].get("clock"),
            "target_costs_us": doc.get("target_costs_us") or doc["info"].get("target_costs_us") or {},
            "release_note": release_note(doc["info"]["version"]),
        }
    )


async def register(db: AsyncDatabase, *, info: FollowerInfo, approved: bool | None) -> tuple[FollowerView, str | None]:
    """Create or refresh the follower as ready, approved or not (None: as it was; a new one is not); returns its view
    and the incarnation it had before (None if new)."""
    now = utcnow()
    fields = {
        "info": info.model_dump(),
        "incarnation": info.incarnation,
        "state": "ready",
        "last_seen": now,
        "registered_at": now,
        "running_job": None,
        **({"approved": approved} if approved is not None else {}),
    }
    before = await db[COLLECTION].find_one_and_update(
        {"_id": info.follower_id}, {"$set": fields}, upsert=True, return_document=ReturnDocument.BEFORE
    )
    is_approved = approved if approved is not None else bool((before or {}).get("approved"))
    view = FollowerView(
        info=info,
        state="ready" if is_approved else "pending",
        last_seen=now,
        registered_at=now,
        running_job=None,
        release_note=release_note(info.version),
    )
    return view, (before["incarnation"] if before is not None else None)


async def _set_by_admin(db: AsyncDatabase, follower_id: str, fields: dict[str, Any]) -> FollowerView:
    """An admin's flag on a follower (approved, draining), and its view after; NotFound if unknown."""
    doc = await db[COLLECTION].find_one_and_update({"_id": follower_id}, {"$set": fields}, return_document=ReturnDocument.AFTER)
    if doc is None:
        raise NotFound(f"follower {follower_id} is not registered", field="follower_id")
    return follower_view(doc)


async def approve(db: AsyncDatabase, *, follower_id: str) -> FollowerView:
    """An admin approves a pending follower: it may take jobs from now on; NotFound if unknown."""
    return await _set_by_admin(db, follower_id, {"approved": True})


async def is_approved(db: AsyncDatabase, *, follower_id: str) -> bool:
    """Whether this follower was approved (an unknown one was not)."""
    return await db[COLLECTION].find_one({"_id": follower_id, "approved": True}, {"_id": 1}) is not None


class Beats:
    """What this leader last wrote of each follower's heartbeat: its incarnation, the fields and when. A beat that
    changes none of them is answered from here and written at most every `rewrite_after_s`, so PerfDB's `last_seen`
    lags a live follower by at most that. Liveness is judged from each beat's arrival (leader.clock.Ages), not from
    `last_seen`; a follower judged missing had been silent far longer than `rewrite_after_s`, so its next beat is
    written, and answered "returned". (Under read load PerfDB's write per unchanged beat was a quarter of its core.)"""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, tuple[str, dict[str, Any], float]] = {}

    def current(self, follower_id: str, incarnation: str, fields: dict[str, Any], rewrite_after_s: float) -> bool:
        """Whether this beat of `follower_id` says what the last one written said, and that was under `rewrite_after_s`
        ago."""
        last = self._last.get(follower_id)
        return last is not None and last[:2] == (incarnation, fields) and self._clock() - last[2] < rewrite_after_s

    def wrote(self, follower_id: str, incarnation: str, fields: dict[str, Any]) -> None:
        self._last[follower_id] = (incarnation, fields, self._clock())

    def forget(self, follower_id: str) -> None:
        """The next beat is written (the follower registered, left or was removed)."""
        self._last.pop(follower_id, None)


async def heartbeat(db: AsyncDatabase, *, follower_id: str, beat: Heartbeat, beats: Beats, rewrite_after_s: float) -> Heard:
    """Record a heartbeat of the registered incarnation (a missing follower comes back): whether it was unknown, live,
    or back from missing (the same process: it was silent, not dead). A beat that changes nothing is written at most
    every `rewrite_after_s` (Beats)."""
    fields = {
        "state": beat.state,
        "running_job": beat.running_job,
        "held": [h.model_dump() for h in beat.held],
        "waiting_reason": beat.waiting_reason,
        **({"clock": beat.clock.model_dump()} if beat.clock is not None else {}),
        **({"target_costs_us": beat.target_costs_us} if beat.target_costs_us is not None else {}),
    }
    if beats.current(follower_id, beat.incarnation, fields, rewrite_after_s):
        return "live"
    written = {**fields, "last_seen": utcnow()}
    this = {"_id": follower_id, "incarnation": beat.incarnation}
    # One write for a live follower's beat (every beat but a comeback's); a second only when that one matched nothing.
    if (await db[COLLECTION].update_one({**this, "state": {"$ne": MISSING}}, {"$set": written})).matched_count:
        said: Heard = "live"
    elif (await db[COLLECTION].update_one(this, {"$set": written})).matched_count:
        said = "returned"
    else:
        said = "unknown"
    if said == "unknown":
        beats.forget(follower_id)
    else:
        beats.wrote(follower_id, beat.incarnation, fields)
    return said


async def set_draining(db: AsyncDatabase, *, follower_id: str, draining: bool) -> FollowerView:
    """Drain (no new jobs; the running one finishes) or resume a follower; NotFound if unknown."""
    return await _set_by_admin(db, follower_id, {"draining": draining})


async def remove(db: AsyncDatabase, *, follower_id: str) -> None:
    """Forget a follower; NotFound if unknown (an agent still running registers again on its next heartbeat)."""
    result = await db[COLLECTION].delete_one({"_id": follower_id})
    if result.deleted_count == 0:
        raise NotFound(f"follower {follower_id} is not registered", field="follower_id")


async def available_docs(db: AsyncDatabase) -> list[dict[str, Any]]:
    """The documents (id and info) of the followers that may take work: approved, not missing, not draining."""
    return await db[COLLECTION].find(_MAY_WORK, {"info": 1}).to_list(None)


async def get_follower(db: AsyncDatabase, *, follower_id: str) -> FollowerView | None:
    """A follower as last registered and heard from, None if unknown."""
    doc = await db[COLLECTION].find_one({"_id": follower_id})
    return follower_view(doc) if doc is not None else None


_CLASS_FIELDS = {"info.labels": 1, "info.gpus": 1}


def _class_and_gpus(doc: dict[str, Any]) -> tuple[str, int]:
    """A follower document's class (leader.domain.follower_class: its `class` label, else its first GPU's model, else
    cpu) and GPU count."""
    info = doc.get("info") or {}
    gpus = [str(g["name"]) for g in info.get("gpus") or []]
    return follower_class(info.get("labels") or {}, gpus), len(gpus)


async def class_of(db: AsyncDatabase, *, follower_id: str) -> str | None:
    """A follower's class, None if unknown."""
    doc = await db[COLLECTION].find_one({"_id": follower_id}, _CLASS_FIELDS)
    return _class_and_gpus(doc)[0] if doc is not None else None


async def follower_classes(db: AsyncDatabase) -> dict[str, tuple[str, int]]:
    """Each follower's class and GPU count (what usage is accounted by)."""
    return {doc["_id"]: _class_and_gpus(doc) async for doc in db[COLLECTION].find({}, _CLASS_FIELDS)}


async def incarnation_of(db: AsyncDatabase, *, follower_id: str) -> str | None:
    """The registered incarnation of a follower, None if unknown."""
    doc = await db[COLLECTION].find_one({"_id": follower_id}, {"incarnation": 1})
    return doc["incarnation"] if doc is not None else None


async def list_followers(db: AsyncDatabase) -> list[FollowerView]:
    """Every follower ever registered, by id."""
    docs = await db[COLLECTION].find({}).sort("_id", 1).to_list(None)
    return [follower_view(doc) for doc in docs]


async def candidates(db: AsyncDatabase) -> list[Candidate]:
    """Followers that may take work (approved, not missing, not draining) with their backends and GPUs."""
    docs = (
        await db[COLLECTION]
        .find(
            _MAY_WORK,
            {"info.backends": 1, "info.trusted_only": 1, "info.network_shaping": 1, "info.gpus": 1, "info.labels": 1},
        )
        .to_list(None)
    )
    return [
        Candidate(
            doc["_id"],
            offered_backends(
                doc["info"]["backends"], doc["info"].get("trusted_only") or (), shaping=doc["info"].get("network_shaping") or ()
            ),
            tuple(Gpu(g["name"], int(g["memory_mb"])) for g in doc["info"].get("gpus") or []),
            tuple(sorted((doc["info"].get("labels") or {}).items())),
        )
        for doc in docs
    ]


async def live_ids(db: AsyncDatabase) -> list[tuple[str, Any]]:
    """(id, last_seen) of every follower not missing; last_seen only as a token that a heartbeat changes."""
    docs = await db[COLLECTION].find({"state": {"$ne": MISSING}}, {"_id": 1, "last_seen": 1}).to_list(None)
    return [(doc["_id"], doc.get("last_seen")) for doc in docs]


async def mark_missing(db: AsyncDatabase, *, follower_id: str, last_seen: Any) -> bool:
    """The follower becomes missing unless a heartbeat landed since `last_seen` was read; whether it did."""
    result = await db[COLLECTION].update_one(
        {"_id": follower_id, "state": {"$ne": MISSING}, "last_seen": last_seen}, {"$set": {"state": MISSING}}
    )
    return result.modified_count > 0


async def leave(db: AsyncDatabase, *, follower_id: str, incarnation: str) -> bool:
    """The agent of this incarnation is stopping: it is missing now, and a beat it sent before it stopped no longer
    counts (its incarnation is forgotten: a restarted agent registers anew); False if that agent was not registered."""
    result = await db[COLLECTION].update_one(
        {"_id": follower_id, "incarnation": incarnation},
        {"$set": {"state": MISSING, "incarnation": None, "running_job": None, "held": []}},
    )
    return result.matched_count > 0


async def missing(db: AsyncDatabase) -> dict[str, str | None]:
    """The followers currently missing: id → the incarnation that went silent (None: it left, giving its jobs back)."""
    docs = await db[COLLECTION].find({"state": MISSING}, {"_id": 1, "incarnation": 1}).to_list(None)
    return {doc["_id"]: doc.get("incarnation") for doc in docs}
