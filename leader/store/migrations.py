"""PerfDB's schema history: the version the database is at, and the migrations that bring documents written by an
older leader to the shape this one reads.

The database records its schema version in one document (`meta`, `_id: "schema"`) with each migration applied (when,
by which release, how many documents it changed). A starting leader runs, in order, every migration above the
recorded version, recording the version after each (a leader stopped half-way goes on from there); each migration
selects the documents still in the old shape, so running one again changes nothing. A database at a version newer
than this leader knows is refused (SchemaTooNew): an older leader would misread what a newer one wrote.

Each migration retires a way the code used to read old documents (a missing team read as the default team's, a
missing owner as the admin's, a job's measured seconds guessed from its estimate): the stores read one shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common import __version__
from common.spec.grid import START_COST_S
from common.wire.auth import DEFAULT_TEAM
from leader.clock import utcnow
from leader.store import datasets as datasets_store
from leader.store import followers as followers_store
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import models as models_store
from leader.store import results as results_store
from leader.store import rowcounts
from leader.store import sessions as sessions_store
from leader.store import users as users_store

log = logging.getLogger(__name__)

META = "meta"
SCHEMA_ID = "schema"
BATCH = 500  # documents read per round trip while migrating


class SchemaTooNew(RuntimeError):
    """The database was written by a leader of a newer schema than this one knows."""


@dataclass(frozen=True)
class Migration:
    version: int  # the schema version the database is at once this has run
    name: str
    apply: Callable[[AsyncDatabase], Awaitable[int]]  # returns how many documents it changed


async def _jobs_measured_seconds(db: AsyncDatabase) -> int:
    """Jobs stored before the duration-aware estimator lack `measured_s` (the load's share of their estimate) and
    `base_estimate_s` (the spec's estimate before the history corrected it): the estimate then was the spec's, and
    the load's share is it less the start cost per backend."""
    changed = 0
    jobs = db[jobs_store.COLLECTION]
    query = {"$or": [{"measured_s": {"$exists": False}}, {"base_estimate_s": {"$exists": False}}]}
    fields = {"estimate_s": 1, "base_estimate_s": 1, "measured_s": 1, "spec.backends": 1}
    async for doc in jobs.find(query, fields).batch_size(BATCH):
        base = float(doc.get("base_estimate_s", doc.get("estimate_s", 0.0)))
        backends = len((doc.get("spec") or {}).get("backends") or ())
        measured = doc.get("measured_s")
        if measured is None:
            measured = max(0.0, base - START_COST_S * backends)
        result = await jobs.update_one({"_id": doc["_id"]}, {"$set": {"base_estimate_s": base, "measured_s": measured}})
        changed += result.modified_count
    return changed


TEAM_COLLECTIONS = (
    jobs_store.COLLECTION,
    models_store.COLLECTION,
    datasets_store.COLLECTION,
    leaderboard_store.COLLECTION,
    users_store.COLLECTION,
    sessions_store.COLLECTION,
)
OWNER_COLLECTIONS = (jobs_store.COLLECTION, leaderboard_store.BASELINES)


async def _teams_and_owners(db: AsyncDatabase) -> int:
    """Documents stored before teams have none: they are the default team's. Jobs and baselines stored before owners
    were kept are the admin's."""
    changed = 0
    for collection in TEAM_COLLECTIONS:
        result = await db[collection].update_many({"team": None}, {"$set": {"team": DEFAULT_TEAM}})
        changed += result.modified_count
    for collection in OWNER_COLLECTIONS:
        result = await db[collection].update_many({"owner": None}, {"$set": {"owner": "admin"}})
        changed += result.modified_count
    return changed


async def _rows_environment(db: AsyncDatabase) -> int:
    """Leaderboard rows stored before rows kept the reproducibility record lack `environment`: it is their result's
    (the row's attempt, the row's point), so compare can say whether two old runs are comparable."""
    changed = 0
    rows = db[leaderboard_store.COLLECTION].find({"environment": {"$exists": False}}, {"job_id": 1, "attempt": 1, "index": 1})
    async for row in rows.batch_size(BATCH):
        key = f"{row['job_id']}:{row['attempt']}:{row['index']}"
        stored = await db[results_store.COLLECTION].find_one({"_id": key}, {"result.environment": 1})
        env: dict[str, Any] = ((stored or {}).get("result") or {}).get("environment") or {}
        result = await db[leaderboard_store.COLLECTION].update_one({"_id": row["_id"]}, {"$set": {"environment": env}})
        changed += result.modified_count
    return changed


async def _rows_counted(db: AsyncDatabase) -> int:
    """The leaderboard is read from PerfDB page by page: rows stored before that lack `samples_per_s` (it was worked
    out as they were read: requests/s times batch size) and carry `updated_ns` (the in-memory index's sync stamp), and
    nothing counted them by sort bucket or kept each model's best (leader/store/rowcounts.py, rowbest.py). Counts exist
    once this has run: running it again recounts nothing."""
    rows = db[leaderboard_store.COLLECTION]
    changed = (await rows.update_many({"updated_ns": {"$exists": True}}, {"$unset": {"updated_ns": ""}})).modified_count
    async for row in rows.find({"samples_per_s": None, "throughput": {"$ne": None}}, {"throughput": 1, "batch_size": 1}):
        samples = float(row["throughput"]) * int(row.get("batch_size") or 1)
        changed += (await rows.update_one({"_id": row["_id"]}, {"$set": {"samples_per_s": samples}})).modified_count
    if await db[rowcounts.COUNTS].find_one({}, {"_id": 1}) is None and await rows.find_one({}, {"_id": 1}) is not None:
        changed += await leaderboard_store.recount(db)
    return changed


async def _followers_approved(db: AsyncDatabase) -> int:
    """Followers registered before approval existed were trusted when they joined: they stay approved (a new join
    with the join token is pending unless the leader's follower_approval is "join-token")."""
    result = await db[followers_store.COLLECTION].update_many({"approved": None}, {"$set": {"approved": True}})
    return result.modified_count


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "jobs carry their measured seconds and the spec's estimate", _jobs_measured_seconds),
    Migration(2, "every document carries its team, every job and baseline its owner", _teams_and_owners),
    Migration(3, "leaderboard rows carry their result's reproducibility record", _rows_environment),
    Migration(4, "leaderboard rows are counted by sort bucket, each model's best kept", _rows_counted),
    Migration(5, "followers registered before approval existed are approved", _followers_approved),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


async def schema_version(db: AsyncDatabase) -> int:
    """The version the database is at (0: never migrated: written before schema versions, or empty)."""
    doc = await db[META].find_one({"_id": SCHEMA_ID}, {"version": 1})
    return int(doc["version"]) if doc is not None else 0


async def migrate(db: AsyncDatabase) -> list[tuple[Migration, int]]:
    """Bring the database to SCHEMA_VERSION: each migration above its version, in order, the version recorded after
    each; returns what ran and how many documents each changed. SchemaTooNew for a database ahead of this leader."""
    current = await schema_version(db)
    if current > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"PerfDB is at schema version {current}, newer than this leader's {SCHEMA_VERSION} (benchfleet {__version__}): "
            "run the leader's newer release, or restore a backup taken before the upgrade"
        )
    ran: list[tuple[Migration, int]] = []
    for migration in MIGRATIONS:
        if migration.version <= current:
            continue
        changed = await migration.apply(db)
        entry = {"version": migration.version, "name": migration.name, "changed": changed, "at": utcnow(), "by": __version__}
        await db[META].update_one(
            {"_id": SCHEMA_ID}, {"$set": {"version": migration.version}, "$push": {"applied": entry}}, upsert=True
        )
        log.info("PerfDB migrated to schema %d (%s): %d document(s) changed", migration.version, migration.name, changed)
        ran.append((migration, changed))
    return ran
