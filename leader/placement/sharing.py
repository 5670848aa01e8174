"""What placement knows of teams (common/fairshare.py is the rule): each team's weight and use of the fleet over the
sliding window, the order the leader's queue runs in, and the daily quotas per follower class that keep a team's jobs
off a class for the rest of the UTC day. Read from PerfDB at most every USES_TTL_S, so a placement tick costs no more
reads than that."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from common.fairshare import AGEING_PER_S, WAIT_BOUND, WINDOW_S, Shares, TeamUse, order_key
from common.wire.teams import TeamSettings
from leader.clock import utcnow
from leader.domain import Candidate, QueuedJob
from leader.placement.book import JobBook
from leader.store import durations as durations_store
from leader.store import teams as teams_store
from leader.store import usage as usage_store

# Which followers a team's jobs may not take now, and the reason a job waits when no other is left.
QuotaBlock = tuple[Callable[[Candidate], bool], Callable[[], str]]

# The teams' use of the fleet is read again at most this often (a sliding window of hours moves little in 5 s).
USES_TTL_S = 5.0
# Kinds of job (model, backends) whose learned corrections are kept between reads; past it they are read afresh.
MAX_KINDS = 4096


def _kind(job: QueuedJob) -> tuple[str, str]:
    """A job's kind as the durations store keys it: its model and its backends."""
    return _kind_of(job.model_ref, job.backends)


@functools.lru_cache(maxsize=MAX_KINDS)
def _kind_of(model_ref: str, backends: frozenset[str]) -> tuple[str, str]:
    return model_ref, durations_store.backends_key(backends)


@dataclass
class _Cached:
    """One read of PerfDB and when it was made."""

    at: float = -float("inf")
    value: Any = None

    def fresh(self) -> bool:
        return time.monotonic() - self.at < USES_TTL_S


class Sharing:
    """The teams' standing as placement needs it: each part read only when asked for (the window's use only when the
    leader's queue orders by it, the day's use only when a team has a quota)."""

    def __init__(self, db: AsyncDatabase, *, ageing_per_s: float = AGEING_PER_S, wait_bound: float = WAIT_BOUND) -> None:
        self._db = db
        self.ageing_per_s, self.wait_bound = ageing_per_s, wait_bound  # the leader's queue's (common/fairshare.py)
        self._settings, self._window, self._today = _Cached(), _Cached(), _Cached()
        self._learned: dict[tuple[str, str], _Cached] = {}
        self.generation = 0  # moves when the teams' settings change (an order made before is not of them)
        self._recent = usage_store.RecentRuns()  # the runs of the window and the day, kept current by the feed

    def forget(self) -> None:
        """Read again at the next use (an admin changed a team's settings)."""
        self._settings, self._window, self._today = _Cached(), _Cached(), _Cached()
        self.generation += 1

    async def _learned_for(self, batch: list[QueuedJob]) -> dict[tuple[str, str], durations_store.Correction]:
        """Each kind's correction from its history fleet-wide (leader/store/durations.py), read at most every
        USES_TTL_S: the order ranks a job before its follower, and so the follower's own correction, is chosen."""
        if len(self._learned) > MAX_KINDS:
            self._learned.clear()
        out = {}
        for kind in {_kind_of(model_ref, backends) for model_ref, backends in {(job.model_ref, job.backends) for job in batch}}:
            cached = self._learned.get(kind)
            if cached is None or not cached.fresh():
                learned = await durations_store.correction(
                    self._db, model_ref=kind[0], backends=kind[1], follower_id=durations_store.ANY_FOLLOWER
                )
                cached = self._learned[kind] = _Cached(time.monotonic(), learned)
            out[kind] = cached.value
        return out

    async def settings(self) -> dict[str, TeamSettings]:
        if not self._settings.fresh():
            self._settings = _Cached(time.monotonic(), await teams_store.settings(self._db))
        return dict(self._settings.value)

    async def _window_use(self) -> dict[str, float]:
        if not self._window.fresh():
            use = await usage_store.window_use(self._db, now=utcnow(), window_s=WINDOW_S, recent=self._recent)
            self._window = _Cached(time.monotonic(), use)
        return dict(self._window.value)

    async def _day_use(self) -> dict[tuple[str, str], float]:
        if not self._today.fresh():
            self._today = _Cached(time.monotonic(), await usage_store.day_use(self._db, now=utcnow(), recent=self._recent))
        return dict(self._today.value)

    async def uses(self, book: JobBook) -> dict[str, TeamUse]:
        """Each team's weight, follower seconds in the window, whether it contends (a job queued or on a follower) and
        how many followers run its jobs now."""
        settings, window = await self.settings(), await self._window_use()
        active, running = book.teams(), book.running_by_team()
        return {
            team: TeamUse(settings.get(team, TeamSettings()).weight, window.get(team, 0.0), team in active, running.get(team, 0))
            for team in active | set(window)
            if team
        }

    async def order(self, batch: list[QueuedJob], book: JobBook, followers: int) -> list[QueuedJob]:
        """The queued jobs in the order they are to run (common/fairshare.py: order_key) on a fleet of `followers`: by
        class, jobs within their teams' shares first, then overdue jobs first come first served, then the shortest
        estimate (learned from the history of its kind) with ageing."""
        # Read from the book before any await: a view's ordering runs beside the placer's tick, which changes the book.
        batch = [job for job in batch if job.job_id in book.queued]
        created = {job.job_id: book.queued[job.job_id][0] for job in batch}
        since = {job.job_id: book.since[job.job_id] for job in batch}
        ahead = dict(book.fcfs_ahead(batch, followers))
        shares = Shares(await self.uses(book), fleet=followers)  # summed once for the whole batch
        now = utcnow().timestamp()
        learned = await self._learned_for(batch)
        # A queue of thousands holds few distinct estimates: each corrected once (kind, spec estimate, measured part).
        corrected: dict[tuple[str, frozenset[str], float, float | None], float] = {}
        ageing_per_s, wait_bound = self.ageing_per_s, self.wait_bound

        def key(job: QueuedJob) -> tuple[tuple[int, int, int, float], tuple[datetime, str]]:
            memo = (job.model_ref, job.backends, job.estimate_s, job.measured_s)
            estimate_s = corrected.get(memo)
            if estimate_s is None:
                estimate_s = corrected[memo] = learned[_kind(job)].estimate(job.estimate_s, job.measured())
            fair = order_key(
                estimate_s=estimate_s,
                waited_s=now - since[job.job_id],
                ahead_s=ahead.get(job.job_id, 0.0),
                priority=job.priority,
                team=job.team,
                uses=shares,
                ageing_per_s=ageing_per_s,
                wait_bound=wait_bound,
                fleet=followers,
            )
            return fair, created[job.job_id]

        return sorted(batch, key=key)

    async def quota_block(self, team: str) -> QuotaBlock | None:
        """For a team with daily quotas: which followers its jobs may not take now (their class's quota is used up)
        and the reason a job waits when none other is left; None when it has no quota."""
        quotas = (await self.settings()).get(team, TeamSettings()).quota_hours_per_day if team else {}
        if not quotas:
            return None
        today = await self._day_use()

        def limit(cls: str) -> float | None:
            return quotas.get(cls, quotas.get("*"))

        def spent(candidate: Candidate) -> bool:
            cls = candidate.follower_class
            quota = limit(cls)
            return quota is not None and today.get((team, cls), 0.0) >= quota

        def reason() -> str:
            spent_classes = {c for (t, c), hours in today.items() if t == team and (q := limit(c)) is not None and hours >= q}
            spent_classes |= {c for c, q in quotas.items() if q == 0}  # a class it may not use at all (`*`: any other)
            used = "; ".join(f"{today.get((team, c), 0.0):.2f} of {limit(c) or 0.0:g} h on {c}" for c in sorted(spent_classes))
            return (
                f"team {team} used its daily quota of follower-hours ({used}): its jobs wait for 00:00 UTC, or for a "
                "follower of a class it has hours left on"
            )

        return spent, reason
