"""The placer's runs of the recent past (leader.store.usage.RecentRuns), kept by the jobs' change feed, agree with a
full read (runs_between) as jobs start, end, requeue and age; jobs that never ran are not kept."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import AsyncMongoClient

from leader.store import usage
from tests.conftest import Service


def _ms(at: datetime) -> datetime:
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def _order(run: tuple[str, datetime | None]) -> tuple[str, datetime]:
    return run[0], run[1] or datetime.max.replace(tzinfo=UTC)  # (a run still running ends last)


def _entry(state: str, at: datetime, follower: str | None = None) -> dict[str, Any]:
    return {"state": state, "at": at, "attempt": 1, "reason": None, "follower_id": follower}


def test_recent_runs_follow_the_feed_and_agree_with_a_full_read(mongo_service: Service) -> None:
    async def run() -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_service.url)
        db = client[f"runs_{uuid.uuid4().hex[:10]}"]
        jobs = db[usage.JOBS]
        now = _ms(datetime.now(UTC))  # (PerfDB keeps milliseconds)
        hour = timedelta(hours=1)

        async def put(job_id: str, state: str, history: list[dict[str, Any]], team: str = "red") -> None:
            doc = {"team": team, "owner": "ann", "state": state, "history": history, "updated_at": datetime.now(UTC)}
            await jobs.replace_one({"_id": job_id}, doc, upsert=True)

        async def agree(recent: usage.RecentRuns, since: datetime) -> list[tuple[str, datetime | None]]:
            until = datetime.now(UTC)
            held = sorted(((r.job_id, r.end) for r in await recent.between(db, since, until)), key=_order)
            full = sorted(((r.job_id, r.end) for r in await usage.runs_between(db, since, until)), key=_order)
            assert held == full
            return held

        try:
            await put("old", "succeeded", [_entry("queued", now - 30 * hour), _entry("running", now - 29 * hour, "f1"),
                                           _entry("succeeded", now - 28 * hour)])
            await jobs.update_one({"_id": "old"}, {"$set": {"updated_at": now - 28 * hour}})
            await put("done", "succeeded", [_entry("queued", now - 2 * hour), _entry("running", now - 2 * hour, "f1"),
                                            _entry("succeeded", now - hour)])
            await put("waiting", "queued", [_entry("queued", now)])
            recent = usage.RecentRuns()
            window = now - 4 * hour
            assert [j for j, _ in await agree(recent, window)] == ["done"]
            # A job starts running, another is submitted and never runs: the feed brings the first, not the second.
            await put("runs", "running", [_entry("queued", now), _entry("running", now, "f2")], team="blue")
            for k in range(20):
                await put(f"q{k}", "queued", [_entry("queued", now)])
            assert await agree(recent, window) == [("done", now - hour), ("runs", None)]
            assert set(recent._runs) == {"done", "runs"}  # jobs that never ran are not held
            # It ends; then it is requeued and runs again (two runs of one job).
            end = _ms(datetime.now(UTC))
            history = [_entry("queued", now), _entry("running", now, "f2"), _entry("queued", end),
                       _entry("running", end, "f3")]
            await put("runs", "running", history, team="blue")
            held = await agree(recent, window)
            assert ("runs", None) in held and ("runs", end) in held
            # The day (further back than the window, within what is kept): from the feed as well.
            assert await agree(recent, now - 20 * hour)
            # Asked further back than anything held: a full read, still the same answer (the 28-hour-old run).
            assert ("old", now - 28 * hour) in await agree(recent, now - 30 * hour)
        finally:
            await client.drop_database(db.name)
            await client.close()

    asyncio.run(run())
