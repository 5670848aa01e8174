"""Teams' settings in PerfDB: each team's weight in the fleet's fair share and its daily quotas per follower class
(admin-set; a team without a document has the defaults). A team exists by its tokens and jobs; this collection only
holds what an admin changed."""

from __future__ import annotations

from pymongo.asynchronous.database import AsyncDatabase

from common.wire.teams import TeamSettings
from leader.clock import utcnow
from leader.store import jobs, users

COLLECTION = "teams"


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Documents are looked up by _id (the team's name) only."""


async def settings(db: AsyncDatabase) -> dict[str, TeamSettings]:
    """Every team's settings an admin stored (others have the defaults)."""
    return {
        d["_id"]: TeamSettings.model_validate({k: v for k, v in d.items() if k in TeamSettings.model_fields})
        async for d in db[COLLECTION].find({})
    }


async def egress_allow(db: AsyncDatabase, team: str) -> list[str]:
    """The team's own allow-list of non-public networks for its targets (empty unless an admin set one)."""
    doc = await db[COLLECTION].find_one({"_id": team}, {"egress_allow": 1})
    return list((doc or {}).get("egress_allow") or [])


async def known(db: AsyncDatabase) -> list[str]:
    """Every team that has a token, a job or settings, sorted."""
    names = set(await db[users.COLLECTION].distinct("team")) | set(await db[jobs.COLLECTION].distinct("team"))
    names |= set(await db[COLLECTION].distinct("_id"))
    return sorted(n for n in names if isinstance(n, str) and n)


async def set_team(db: AsyncDatabase, *, team: str, settings: TeamSettings, by: str) -> None:
    """Store an admin's settings for the team."""
    await db[COLLECTION].update_one(
        {"_id": team}, {"$set": {**settings.model_dump(), "updated_by": by, "updated_at": utcnow()}}, upsert=True
    )
