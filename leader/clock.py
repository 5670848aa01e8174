"""One source of time for the leader: aware UTC datetimes (also for what PerfDB hands back naive) for what is shown and
stored, and monotonic ages for every decision (liveness, lost dispatches), so that a step of the wall clock changes
no decision; `WallSteps` notices such a step where stored timestamps must be read again (the placer's change feed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta

# Every change feed over `updated_at` (the placer's book, the jobs list's index, the fair share's runs, the placement
# metrics) starts this long before its last read began: a write stamped before a read that commits after it is read
# the next time. (Not from the newest write seen: after a burst of submissions, that read the burst's last moments
# again on every tick until the next write, bench/leader_load.py.)
FEED_OVERLAP = timedelta(seconds=2)


def utcnow() -> datetime:
    """Now, timezone-aware UTC, truncated to milliseconds as BSON stores it."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def as_utc(value: datetime) -> datetime:
    """Mark a naive datetime read from PerfDB as the UTC it is."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Ages:
    """Monotonic seconds since each key was last marked (a follower heard, a job sent).

    A key not marked since this leader started is as old as the leader: a restarted leader gives everyone one full
    timeout before it judges them.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, keep_s: float = 86400.0, max_keys: int = 100_000) -> None:
        self._clock = clock
        self._started = clock()
        self._at: dict[Hashable, float] = {}
        self._keep_s, self._max_keys = keep_s, max_keys

    def now(self) -> float:
        """This clock's time, to mark a key with later (mark(at=))."""
        return self._clock()

    def mark(self, key: Hashable, *, at: float | None = None) -> None:
        """`key` was heard from (or sent) now, or `at` (a now() read earlier; never moving a later mark back); past
        `max_keys`, keys older than `keep_s` are dropped."""
        now = self._clock()
        self._at[key] = now if at is None else max(at, self._at.get(key, at))
        if len(self._at) > self._max_keys:
            self._at = {k: t for k, t in self._at.items() if now - t <= self._keep_s}

    def age_s(self, key: Hashable) -> float:
        """Seconds since `key` was last marked, or since this leader started."""
        return self._clock() - self._at.get(key, self._started)


class WallSteps:
    """Notices the wall clock stepping: wall time that moved more than `tolerance_s` away from monotonic time."""

    def __init__(
        self, *, tolerance_s: float = 1.0, wall: Callable[[], float] | None = None, mono: Callable[[], float] = time.monotonic
    ) -> None:
        # By default the wall clock is this module's utcnow, looked up at each call (tests step it there).
        self._wall: Callable[[], float] = wall or (lambda: utcnow().timestamp())
        self._mono, self._tolerance_s = mono, tolerance_s
        self._offset = self._wall() - mono()

    def stepped_s(self) -> float:
        """How far the wall clock stepped since the last call (0.0 within the tolerance); negative: backwards."""
        offset = self._wall() - self._mono()
        step = offset - self._offset
        self._offset = offset
        return step if abs(step) > self._tolerance_s else 0.0
