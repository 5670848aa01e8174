"""Liveness: followers that stop heartbeating become missing and lose their jobs back to the queue."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from pymongo.asynchronous.database import AsyncDatabase

from leader.clock import Ages
from leader.store import assignments as assignments_store
from leader.store import followers as followers_store

log = logging.getLogger(__name__)

MISSED_REASON = "follower {follower_id} missed heartbeats"
# A tick this much later than its interval means the leader itself lagged (its event loop blocked, or PerfDB slow):
# heartbeats that arrived meanwhile could not be stamped, so that time does not count as the followers' silence.
STALL_S = 0.5


class Monitor:
    """Checks heartbeats every interval by monotonic time (a wall-clock step changes nothing); requeued jobs nudge
    placement."""

    def __init__(
        self,
        *,
        db: AsyncDatabase,
        heard: Ages,
        missing_after_s: float,
        interval_s: float,
        on_requeue: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        deaf_s: Callable[[float, float], float] = lambda now, window_s: 0.0,
    ) -> None:
        self._db = db
        self._heard = heard
        self._missing_after_s = missing_after_s
        self._interval_s = interval_s
        self._on_requeue = on_requeue
        self._clock = clock
        # (now, window) -> seconds of the window the leader answered heartbeats unheard (PerfDB failing: a 503).
        self._deaf_s = deaf_s
        self._last_tick: float | None = None
        self._stalls: deque[tuple[float, float]] = deque()  # (tick that saw it, seconds the leader lagged)

    def allowance_s(self, now: float) -> float:
        """Seconds the leader lagged within the last timeout: added to it, so only silence the leader could hear counts."""
        if self._last_tick is not None:
            lag = now - self._last_tick - self._interval_s
            if lag > STALL_S:
                self._stalls.append((now, lag))
                log.warning("leader lagged %.1fs (liveness tick late): heartbeat timeout extended by it", lag)
        self._last_tick = now
        # A stall matters while beats heard before it can still look old: for one timeout after it ended.
        while self._stalls and now - self._stalls[0][0] > self._missing_after_s:
            self._stalls.popleft()
        return sum(lag for _, lag in self._stalls)

    async def run(self) -> None:
        """Tick forever; an error in one tick is logged and the next tick tries again."""
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("liveness tick failed; retrying")
            await asyncio.sleep(self._interval_s)

    async def tick(self) -> list[str]:
        """Mark silent followers missing and requeue the jobs of every missing follower; returns the requeued job ids."""
        self.allowance_s(self._clock())  # this tick's start: a late one is a stall, even with no follower to judge
        # Followers not heard since this leader started count from its start (Ages): one full timeout to speak up.
        for follower_id, seen in await followers_store.live_ids(self._db):
            # The allowance is read at each judgement, after the awaits before it: a stall during one of them (the
            # loop blocked while PerfDB answered) is silence the leader could not hear, like a stall between ticks.
            now = self._clock()
            timeout_s = self._missing_after_s + self.allowance_s(now)
            # Time since its last beat that the leader could not hear it at all (PerfDB failing) is not its silence.
            age_s = self._heard.age_s(follower_id)
            if age_s - self._deaf_s(now, age_s) > timeout_s and await followers_store.mark_missing(
                self._db, follower_id=follower_id, last_seen=seen
            ):
                log.warning("follower %s not heard for %.1fs (allowed %.1fs): missing", follower_id, age_s, timeout_s)
        # Every tick, not only on the transition: a job left on a missing follower by an interrupted tick is caught too.
        missing = await followers_store.missing(self._db)
        # A follower that went silent lost its running jobs (counted, until that process is heard again); one that left
        # (no incarnation) gave them back.
        silent = {follower_id: incarnation for follower_id, incarnation in missing.items() if incarnation is not None}
        requeued = await assignments_store.requeue_follower_jobs(
            self._db, follower_ids=list(missing), reason=MISSED_REASON, lost=silent
        )
        if requeued:
            log.warning("requeued %d job(s) of missing followers: %s", len(requeued), ", ".join(requeued))
            # A follower heard again while its jobs were requeued: its beat's forgive may have read them before this
            # wrote their loss, so the same process (silent, not dead) is forgiven here too.
            still = await followers_store.missing(self._db)
            for follower_id, incarnation in silent.items():
                if (
                    follower_id not in still
                    and await followers_store.incarnation_of(self._db, follower_id=follower_id) == incarnation
                ):
                    await assignments_store.forgive(self._db, follower_id=follower_id, incarnation=incarnation)
            self._on_requeue()
        return requeued
