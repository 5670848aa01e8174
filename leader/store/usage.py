"""Who used the fleet: every attempt's run (from its `running` history entry to the next entry, or to now while it
runs) is follower time held by its job's team and owner on that follower. The fair share reads the teams' use over
its sliding window from here, and the accounting sums any period by team, user, follower class or follower, with
GPU-hours and the cost at the configured prices. Nothing new is written: job histories already hold every run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.fairshare import use_in_window
from common.wire.jobs import JobState
from common.wire.teams import UsageBy, UsageReport, UsageRow
from leader.clock import FEED_OVERLAP, as_utc, utcnow
from leader.store import followers as followers_store

JOBS = "jobs"
FIELDS = {"team": 1, "owner": 1, "state": 1, "history": 1}


@dataclass(frozen=True)
class Run:
    """One attempt's hold on a follower."""

    job_id: str
    attempt: int
    team: str
    owner: str
    follower_id: str
    start: datetime
    end: datetime | None  # None: still running


def runs_of(doc: Mapping[str, Any]) -> list[Run]:
    """The runs in a job document's history (a split job's own entries are its parts' and are not runs)."""
    history = list(doc.get("history") or [])
    out: list[Run] = []
    for i, entry in enumerate(history):
        if entry.get("state") != JobState.running.value or not entry.get("follower_id"):
            continue
        following = history[i + 1 :]
        end = as_utc(following[0]["at"]) if following else None
        if end is None and doc.get("state") != JobState.running.value:
            continue  # no end recorded and not running: nothing to count
        out.append(
            Run(
                str(doc["_id"]),
                int(entry.get("attempt", 1)),
                str(doc.get("team") or ""),
                str(doc.get("owner") or ""),
                str(entry["follower_id"]),
                as_utc(entry["at"]),
                end,
            )
        )
    return out


async def runs_between(db: AsyncDatabase, since: datetime, until: datetime) -> list[Run]:
    """Every run that overlapped [since, until): jobs running now, and jobs changed since `since` (a run that ended
    in the period changed its job then); two reads, each on its own index."""
    runs: list[Run] = []
    for doc in await _docs_between(db, since):
        runs.extend(r for r in runs_of(doc) if r.start < until and (r.end is None or r.end > since))
    return runs


# A job whose every run ended this long ago counts in no window or day the placer asks for: forgotten.
KEEP = timedelta(hours=25)


class RecentRuns:
    """The runs of the recent past, kept current by the jobs' change feed: what the placer asks every few seconds.

    Why: the window's use was read from every job changed in the window (hours), history and all; with 10,000 jobs
    submitted that is every job, two seconds of PerfDB's one core every five (bench/leader_load.py saw each beat
    stall then). Here the jobs changed since the last read are read (a run that ends or starts changes its job), and
    jobs that never ran are not kept. The first read, and one that reaches further back than any before, reads as
    runs_between does.
    """

    def __init__(self) -> None:
        self._runs: dict[str, list[Run]] = {}
        self._horizon: datetime | None = None  # every run overlapping [horizon, now) is held
        self._since: datetime | None = None  # the feed's position

    async def between(self, db: AsyncDatabase, since: datetime, until: datetime) -> list[Run]:
        """Every run that overlapped [since, until), as runs_between finds them."""
        started = utcnow()
        if self._horizon is None or self._since is None or since < self._horizon:
            docs = await _docs_between(db, since)
            self._runs, self._horizon = {}, since
        else:
            docs = await db[JOBS].find({"updated_at": {"$gte": self._since}}, FIELDS).to_list(None)
        for doc in docs:
            runs = runs_of(doc)
            if runs:
                self._runs[str(doc["_id"])] = runs
            else:
                self._runs.pop(str(doc["_id"]), None)
        self._since = started - FEED_OVERLAP
        gone = min(started - KEEP, since)  # (never what this call asks for)
        self._horizon = max(self._horizon, gone)
        for job_id in [j for j, runs in self._runs.items() if all(r.end is not None and r.end < gone for r in runs)]:
            del self._runs[job_id]
        return [r for runs in self._runs.values() for r in runs if r.start < until and (r.end is None or r.end > since)]


async def _docs_between(db: AsyncDatabase, since: datetime) -> list[dict[str, Any]]:
    """The jobs running now and those changed since `since` (a run that ended since then changed its job then)."""
    docs: dict[str, dict[str, Any]] = {}
    for query in ({"state": JobState.running.value}, {"updated_at": {"$gte": since}}):
        async for doc in db[JOBS].find(query, FIELDS):
            docs[doc["_id"]] = doc
    return list(docs.values())


async def window_use(db: AsyncDatabase, *, now: datetime, window_s: float, recent: RecentRuns | None = None) -> dict[str, float]:
    """Each team's follower seconds within the sliding window ending now (from `recent`, when given)."""
    since = now - timedelta(seconds=window_s)
    runs = await (recent.between(db, since, now) if recent is not None else runs_between(db, since, now))
    ts = now.timestamp()
    return use_in_window(((r.team, r.start.timestamp(), r.end.timestamp() if r.end else None) for r in runs), ts, window_s)


async def day_use(db: AsyncDatabase, *, now: datetime, recent: RecentRuns | None = None) -> dict[tuple[str, str], float]:
    """Follower-hours each team used since 00:00 UTC, by follower class (what daily quotas are kept by), from `recent`
    when given."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    classes = await followers_store.follower_classes(db)
    out: dict[tuple[str, str], float] = {}
    for run in await (recent.between(db, day, now) if recent is not None else runs_between(db, day, now)):
        key = (run.team, classes.get(run.follower_id, ("unknown", 0))[0])
        out[key] = out.get(key, 0.0) + max(0.0, (min(run.end or now, now) - max(run.start, day)).total_seconds()) / 3600
    return out


def account(
    runs: Iterable[Run],
    *,
    since: datetime,
    until: datetime,
    by: UsageBy,
    classes: Mapping[str, tuple[str, int]],
    prices: Mapping[str, float],
    currency: str,
    now: datetime,
) -> UsageReport:
    """Sum the runs' time inside [since, until) per key; the cost at each run's follower class's price per hour."""
    sums: dict[str, dict[str, Any]] = {}

    def blank() -> dict[str, Any]:
        return {"attempts": 0, "jobs": set(), "hours": 0.0, "gpu": 0.0, "cost": 0.0, "priced": True}

    total = blank()
    for run in runs:
        start, end = max(run.start, since), min(run.end or now, until, now)
        hours = (end - start).total_seconds() / 3600
        if hours <= 0:
            continue
        cls, gpus = classes.get(run.follower_id, ("unknown", 0))
        key = {"team": run.team, "user": run.owner, "follower_class": cls, "follower": run.follower_id}[by]
        price = prices.get(cls, prices.get("*"))
        for acc in (sums.setdefault(key, blank()), total):
            acc["attempts"] += 1
            acc["jobs"].add(run.job_id)
            acc["hours"] += hours
            acc["gpu"] += hours * gpus
            acc["cost"] += hours * (price or 0.0)
            acc["priced"] &= price is not None

    def row(key: str, s: dict[str, Any]) -> UsageRow:
        return UsageRow(
            key=key,
            attempts=s["attempts"],
            jobs=len(s["jobs"]),
            follower_hours=s["hours"],
            gpu_hours=s["gpu"],
            cost=s["cost"] if s["priced"] and s["attempts"] else None,
        )

    rows = sorted((row(k, s) for k, s in sums.items()), key=lambda r: (-r.follower_hours, r.key))
    return UsageReport(since=since, until=until, by=by, currency=currency, rows=rows, total=row("total", total))


async def usage(
    db: AsyncDatabase,
    *,
    since: datetime,
    until: datetime,
    by: UsageBy,
    team: str | None,
    prices: Mapping[str, float],
    currency: str,
    now: datetime,
) -> UsageReport:
    """The accounting of [since, until) from PerfDB: every team's runs, or only `team`'s."""
    runs = [r for r in await runs_between(db, since, until) if team is None or r.team == team]
    return account(
        runs,
        since=since,
        until=until,
        by=by,
        classes=await followers_store.follower_classes(db),
        prices=prices,
        currency=currency,
        now=now,
    )
