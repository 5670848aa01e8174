"""Retention: what PerfDB keeps, and for how long (leader settings retention_*; unset: for ever). A sweep at the
leader's start and every retention_sweep_s removes, by the time a job finished (its last update once terminal):
whole jobs after retention_jobs_days (a job pinned as a baseline is kept), raw records after retention_records_days
(the job and its results stay, and say when their records went), live progress after retention_progress_days; and
audit entries older than retention_audit_days. A database outage skips a round."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from common.wire.jobs import TERMINAL_STATES
from leader.clock import utcnow
from leader.store import audit as audit_store
from leader.store import deletion
from leader.store import jobs as jobs_store
from leader.store import leaderboard as leaderboard_store
from leader.store import progress as progress_store

log = logging.getLogger(__name__)

FINISHED = [s.value for s in TERMINAL_STATES]


@dataclass(frozen=True)
class Retention:
    """Days each kind of data is kept (None: for ever)."""

    jobs_days: float | None = None
    records_days: float | None = None
    progress_days: float | None = None
    audit_days: float | None = None

    @property
    def keeps_everything(self) -> bool:
        return all(d is None for d in (self.jobs_days, self.records_days, self.progress_days, self.audit_days))


def _before(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)


async def _finished_before(db: AsyncDatabase, cutoff: datetime, extra: dict[str, object]) -> list[str]:
    query = {"state": {"$in": FINISHED}, "updated_at": {"$lt": cutoff}, **extra}
    return [d["_id"] async for d in db[jobs_store.COLLECTION].find(query, {"_id": 1})]


async def sweep_once(db: AsyncDatabase, policy: Retention) -> dict[str, int]:
    """One sweep; how many jobs, records files, progress documents and audit entries it removed."""
    now, out = utcnow(), {"jobs": 0, "records": 0, "progress": 0, "audit": 0}
    if policy.jobs_days is not None:
        pinned = {d["job_id"] async for d in db[leaderboard_store.BASELINES].find({}, {"job_id": 1})}
        for job_id in await _finished_before(db, _before(now, policy.jobs_days), {"part_of": None}):
            if job_id not in pinned:
                await deletion.footprint(db, job_id=job_id, delete=True)
                out["jobs"] += 1
    if policy.records_days is not None:
        expired = await _finished_before(db, _before(now, policy.records_days), {"records_purged": {"$ne": True}})
        if expired:
            # Marked before the files go, so a read in between says retention removed them (not that there were
            # none); purged after, so a sweep cut short is finished by the next one.
            jobs = db[jobs_store.COLLECTION]
            # (updated_at moves with it: the jobs list keeps each job's view while its updated_at holds)
            marked = {"records_expired_at": now, "updated_at": now}
            await jobs.update_many({"_id": {"$in": expired}, "records_expired_at": None}, {"$set": marked})
            out["records"] = (await deletion.delete_records(db, job_ids=expired)).documents
            await jobs.update_many({"_id": {"$in": expired}}, {"$set": {"records_purged": True}})
    if policy.progress_days is not None:
        cutoff = _before(now, policy.progress_days)
        stale = await db[progress_store.COLLECTION].delete_many({"updated_at": {"$lt": cutoff}})
        out["progress"] = stale.deleted_count
    if policy.audit_days is not None:
        old = await db[audit_store.COLLECTION].delete_many({"at": {"$lt": _before(now, policy.audit_days)}})
        out["audit"] = old.deleted_count
    return out


async def sweep(db: AsyncDatabase, policy: Retention, *, interval_s: float) -> None:
    """Sweep at start and every interval_s (nothing to do when everything is kept for ever)."""
    if policy.keeps_everything:
        return
    while True:
        try:
            removed = await sweep_once(db, policy)
            if any(removed.values()):
                log.info("retention removed %s", ", ".join(f"{n} {what}" for what, n in removed.items() if n))
        except PyMongoError as exc:
            log.warning("retention sweep skipped: %s", type(exc).__name__)
        await asyncio.sleep(interval_s)
