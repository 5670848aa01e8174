"""Live progress of a running job: the latest measurement windows of each point, as the leader serves them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from common.wire.results import WindowStat

# The leader keeps at most this many windows per point (the most recent), so a long point cannot grow its document.
MAX_WINDOWS_PER_POINT = 120


class PointProgress(BaseModel):
    """The closed windows of one point so far (most recent last, at most MAX_WINDOWS_PER_POINT)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    windows: list[WindowStat]
    updated_at: datetime


class JobProgress(BaseModel):
    """GET /jobs/{id}/progress: the running (or last) attempt's per-point windows; empty before the first window."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    state: str
    attempt: int | None = None
    follower_id: str | None = None
    points: list[PointProgress] = []
    updated_at: datetime | None = None
    dropped: int = 0  # reports the follower could not deliver (never blocks the measurement)
