"""The jobs list's index: each job's place in the list (submitted at, id) and what the list filters by, held in the
leader's memory, so that a page of the list reads from PerfDB only the jobs it shows.

Why: PerfDB's embedded server decodes every candidate of a sorted query before its limit. The newest 100 of 10,000
jobs cost 1.7 s of its one core, and ten readers of the list starved every heartbeat and submission behind them for
seconds (bench/leader_load.py). Here a page's jobs are chosen in memory and read by id.

The index is read whole once (the first list a leader serves), then kept current by the jobs whose `updated_at` moved
(every write to a job sets it; leader.placement.book relies on the same), read again right before each page: a write
that landed before the page was asked is in it. A page checks its filter again on the documents it reads, so an entry
behind the truth can leave a job out for one refresh but never shows one that does not match; a job deleted since
(leader.store.deletion, retention) is dropped from the index when a page finds it gone. A job's view is kept with the
`updated_at` it was made at and shown again while that is unchanged: a page of jobs that did not change reads no job.
(A view is kept only when it was read after its `updated_at`'s millisecond had passed, so no later write can carry
the same stamp; a split job's view is never kept: its progress is its parts'.) A kept view of an unfinished job is
confirmed against PerfDB (its `updated_at`, by id) at most every CONFIRM_EVERY_S, shared by every page meanwhile: an
unfinished job deleted behind the leader's back (no tombstone tells) leaves the list within that. (Confirmed on every
page, ten readers of the newest 100 jobs spent PerfDB's core decoding those jobs: p50 159 ms, against 20 ms now.)
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.wire.jobs import TERMINAL_STATES, JobFacets, JobFilter, JobView
from leader.clock import FEED_OVERLAP, as_utc, utcnow
from leader.store.jobdocs import job_view
from leader.store.jobs import COLLECTION, TOMBSTONE_KEEP, count_parts, deleted_since, tombstone_key
from leader.store.lookup import by_ids

FIELDS = dict.fromkeys(
    ("created_at", "updated_at", "team", "owner", "state", "model_ref", "spec.backends", "follower_id", "parts"), 1
)
Key = tuple[datetime, str]  # (created_at, id): the list is newest first, ties by id
# Views kept, by id with the `updated_at` they were made at: a page of unchanged jobs reads nothing and validates nothing
# again (a job changes only by a write that moves its updated_at, which the feed reads).
MAX_VIEWS = 4096
# What a view is made without: the expanded points and the model's snapshot are the documents' bulk (job_view reads
# neither).
VIEW_PROJECTION = {"points": 0, "model": 0}
# What a kept view of an unfinished job is checked against on each page.
STAMP = {"updated_at": 1}
FINISHED = frozenset(state.value for state in TERMINAL_STATES)
# A view read this long after its updated_at is kept: a later write's stamp (milliseconds, as BSON keeps it) differs.
SETTLED = timedelta(milliseconds=2)
# How long an unfinished job's kept view stands without its stamp read again (see the module's docstring).
CONFIRM_EVERY_S = 1.0


def facets_of(doc: dict[str, Any]) -> JobFacets:
    """What the list filters a job document by."""
    return JobFacets(
        team=str(doc.get("team") or ""),
        state=str(doc.get("state") or ""),
        owner=str(doc.get("owner") or ""),
        model_ref=str(doc.get("model_ref") or ""),
        backends=tuple((doc.get("spec") or {}).get("backends") or ()),
        follower_id=doc.get("follower_id"),
        created_at=as_utc(doc["created_at"]),
        split=bool(doc.get("parts")),
    )


class JobIndex:
    """Every job's key and filter fields, by id, and the keys in list order (ascending: a page walks it backwards)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.generation = 0  # moves with every change the index takes in (a conditional GET's validator)
        self._clear()
        self._lock = asyncio.Lock()
        self._started = 0  # refreshes started, and completed (a caller waits for one that started after it asked)
        self._done = 0

    def _clear(self) -> None:
        self.generation += 1
        self._facets: dict[str, JobFacets] = {}
        self._keys: list[Key] = []
        self._stamps: dict[str, datetime | None] = {}  # each job's updated_at as last read
        self._views: OrderedDict[str, tuple[datetime | None, JobView]] = OrderedDict()  # jobs' views, by updated_at
        self._confirmed: dict[str, float] = {}  # when each kept view's stamp was last read (this index's clock)
        self._since: datetime | None = None  # None: not read yet

    def _put(self, job_id: str, facets: JobFacets, stamp: datetime | None) -> None:
        if self._facets.get(job_id) != facets or self._stamps.get(job_id) != stamp:
            self.generation += 1
        if job_id not in self._facets:  # (a job's submission time never changes: its key stays where it is)
            bisect.insort(self._keys, (facets.created_at, job_id))
        self._facets[job_id] = facets
        self._stamps[job_id] = stamp

    def drop(self, job_id: str) -> None:
        """Forget a job (it was deleted)."""
        facets = self._facets.pop(job_id, None)
        self.generation += 1
        self._stamps.pop(job_id, None)
        self._views.pop(job_id, None)
        self._confirmed.pop(job_id, None)
        if facets is not None:
            self._keys.pop(bisect.bisect_left(self._keys, (facets.created_at, job_id)))

    async def refresh(self, db: AsyncDatabase) -> None:
        """Read what changed since the last refresh (everything, the first time): one refresh that started after this
        call serves it, so concurrent pages share their reads."""
        need = self._started + 1
        async with self._lock:
            if self._done >= need:
                return
            self._started += 1
            started = utcnow()
            if self._since is not None and started - self._since > TOMBSTONE_KEEP:
                self._clear()  # (deletions older than the tombstones kept: read it all again)
            query = {} if self._since is None else {"updated_at": {"$gte": self._since}}
            async for doc in db[COLLECTION].find(query, FIELDS).batch_size(2000):
                self._put(doc["_id"], facets_of(doc), doc.get("updated_at"))
            if self._since is not None and (gone := await deleted_since(db, since=self._since)):
                for job_id in [j for j in self._facets if tombstone_key(j) in gone]:
                    self.drop(job_id)
            self._since = started - FEED_OVERLAP
            self._done = self._started

    async def current(self, db: AsyncDatabase) -> int:
        """The generation after a refresh: unchanged while no job the index holds changed, appeared or went."""
        await self.refresh(db)
        return self.generation

    def count_by_state(self) -> dict[str, int]:
        """How many jobs are in each state, as of the last refresh; a split job is not counted (its parts are)."""
        return dict(Counter(f.state for f in self._facets.values() if not f.split))

    def select(self, where: JobFilter, *, team: str | None, after: Key | None) -> Iterator[str]:
        """The ids the index says `where` selects (of `team`, when given), newest first, after `after`."""
        end = len(self._keys) if after is None else bisect.bisect_left(self._keys, after)
        for k in range(end - 1, -1, -1):
            job_id = self._keys[k][1]
            facets = self._facets[job_id]
            if (team is None or facets.team == team) and where.admits(facets):
                yield job_id

    async def page(
        self,
        db: AsyncDatabase,
        where: JobFilter,
        *,
        limit: int,
        team: str | None,
        after: Key | None,
        refresh: bool = True,
    ) -> list[JobView]:
        """Up to `limit` jobs that `where` selects (of `team`), newest first, after `after`: chosen here, read by id
        (a job's view unchanged since it was made is not read again) and checked again as read."""
        if team is not None and where.team and where.team != team:
            return []  # another team's jobs do not exist for this caller
        if refresh:  # (else the caller refreshed it a moment ago: `current`)
            await self.refresh(db)
        out: list[JobView] = []
        while len(out) < limit:
            chosen = list(itertools.islice(self.select(where, team=team, after=after), limit - len(out)))
            if not chosen:
                break
            after = (self._facets[chosen[-1]].created_at, chosen[-1])  # where the next read resumes, if one is needed
            views: dict[str, JobView] = {}
            for job_id in chosen:
                kept = self._views.get(job_id)
                if kept is not None and kept[0] == self._stamps.get(job_id):
                    views[job_id] = kept[1]
                    self._views.move_to_end(job_id)
            await self._still_there(db, views)
            need = [job_id for job_id in chosen if job_id not in views]
            if need:
                views.update(await self._read(db, need, where, team))
            out.extend(views[job_id] for job_id in chosen if job_id in views)
        return out

    async def _still_there(self, db: AsyncDatabase, views: dict[str, JobView]) -> None:
        """Kept views of unfinished jobs not confirmed for CONFIRM_EVERY_S, checked against PerfDB with one small read:
        one deleted behind the leader's back (unfinished jobs are not deleted through it, so no tombstone tells) is
        dropped, one changed since is read again. (A finished job's deletion through the leader leaves a tombstone the
        refresh reads.)"""
        now = self._clock()
        waiting = [
            job_id
            for job_id, view in views.items()
            if view.state not in FINISHED and now - self._confirmed.get(job_id, -math.inf) >= CONFIRM_EVERY_S
        ]
        if not waiting:
            return
        found = {d["_id"]: d.get("updated_at") async for d in by_ids(db, COLLECTION, waiting, STAMP)}
        for job_id in waiting:
            self._confirmed[job_id] = now
            if job_id not in found:
                self.drop(job_id)  # (and left out of the page, which the next ids fill)
                del views[job_id]
            elif found[job_id] != self._views[job_id][0]:
                del views[job_id]  # changed since: read again whole

    async def _read(self, db: AsyncDatabase, ids: list[str], where: JobFilter, team: str | None) -> dict[str, JobView]:
        """The views of those of `ids` that still exist and match, read from PerfDB; the index brought up to date."""
        read_at, now = utcnow(), self._clock()
        found = {doc["_id"]: doc async for doc in by_ids(db, COLLECTION, ids, VIEW_PROJECTION)}
        await count_parts(db, list(found.values()))
        out: dict[str, JobView] = {}
        for job_id in ids:
            doc = found.get(job_id)
            if doc is None:
                self.drop(job_id)
                continue
            facets = facets_of(doc)
            self._put(job_id, facets, doc.get("updated_at"))
            if not ((team is None or facets.team == team) and where.admits(facets)):
                continue
            out[job_id] = view = job_view(doc)
            stamp = doc.get("updated_at")
            if not facets.split and stamp is not None and read_at - as_utc(stamp) >= SETTLED:
                self._views[job_id] = (stamp, view)
                self._confirmed[job_id] = now
                self._views.move_to_end(job_id)
                if len(self._views) > MAX_VIEWS:
                    self._confirmed.pop(self._views.popitem(last=False)[0], None)
        return out


async def list_jobs(
    db: AsyncDatabase,
    index: JobIndex,
    *,
    where: JobFilter,
    limit: int,
    after: Key | None = None,
    team: str | None = None,
    refresh: bool = True,
) -> list[JobView]:
    """Jobs newest first (of `team`, when given) that `where` selects; with `after` (created_at, id), those that come
    after it (`refresh=False`: the index was refreshed by the caller, `JobIndex.current`)."""
    return await index.page(db, where, limit=limit, team=team, after=after, refresh=refresh)
