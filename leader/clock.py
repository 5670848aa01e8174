"""One source of time for the leader: aware UTC datetimes, also for what PerfDB hands back naive."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, timezone-aware UTC, truncated to milliseconds as BSON stores it."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def as_utc(value: datetime) -> datetime:
    """Mark a naive datetime read from PerfDB as the UTC it is."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
