"""The follower's local queue: Celery tasks are accepted into a durable holding queue, a run loop runs them in order.

Tier 2 of the scheduler. The Celery task only writes the job to disk (fsync, rename) and returns, so the message is
acked once the job is safe here; the run loop then picks, among everything held, the shortest estimated job first,
exactly (a scan over all held jobs, no buckets), with ageing so nothing starves: a job's key is its estimate minus
`ageing_per_s` for every second it has waited, so a job that waited estimate/ageing seconds beats any newcomer.
FCFS (by acceptance time) is the selectable baseline.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from common.followers import HeldJob

log = logging.getLogger(__name__)

Order = Literal["sjf", "fcfs"]


@dataclass
class HeldEntry:
    """One held attempt: its ordering facts and the Celery payload it runs from."""

    job_id: str
    attempt: int
    estimate_s: float
    accepted_at: float  # wall clock: survives an agent restart, unlike the monotonic clock
    seq: int
    payload: dict[str, Any]
    path: Path
    running: bool = False

    @property
    def key(self) -> str:
        return f"{self.job_id}-{self.attempt}"


class HoldingQueue:
    """Thread-safe, durable (one JSON file per attempt) queue of held jobs with exact SJF-with-ageing or FCFS order."""

    def __init__(
        self, directory: Path, *, order: Order = "sjf", ageing_per_s: float = 0.01, clock: Callable[[], float] = time.time
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.order, self.ageing_per_s, self.clock = order, ageing_per_s, clock
        self._entries: dict[str, HeldEntry] = {}
        self._cond = threading.Condition()
        self._seq = 0
        self._load()

    def _load(self) -> None:
        """Pick up what an earlier agent process held (the leader decides on claim whether it is still ours)."""
        for path in sorted(self.directory.glob("*.json")):
            try:
                doc = json.loads(path.read_text())
                fields = {k: doc[k] for k in ("job_id", "attempt", "estimate_s", "accepted_at", "seq", "payload")}
                entry = HeldEntry(**fields, path=path)
            except (OSError, ValueError, KeyError) as exc:
                log.warning("dropping unreadable held job %s: %s", path.name, exc)
                path.unlink(missing_ok=True)
                continue
            self._entries[entry.key] = entry
            self._seq = max(self._seq, entry.seq + 1)
        if self._entries:
            log.info("holding queue: %d job(s) from before the restart", len(self._entries))

    def accept(self, payload: dict[str, Any]) -> HeldEntry:
        """Store a job durably (a repeated delivery of the same attempt is kept once) and wake the run loop."""
        job_id, attempt = str(payload["job_id"]), int(payload["attempt"])
        with self._cond:
            existing = self._entries.get(f"{job_id}-{attempt}")
            if existing is not None:
                return existing
            entry = HeldEntry(job_id, attempt, float(payload["estimate_s"]), self.clock(), self._seq, payload, Path())
            self._seq += 1
            entry.path = self.directory / f"{entry.key}.json"
            doc = {k: getattr(entry, k) for k in ("job_id", "attempt", "estimate_s", "accepted_at", "seq", "payload")}
            tmp = entry.path.with_suffix(".tmp")
            with tmp.open("w") as fh:
                json.dump(doc, fh)
                fh.flush()
                os.fsync(fh.fileno())  # on disk before Celery acks the message
            tmp.replace(entry.path)
            self._entries[entry.key] = entry
            self._cond.notify_all()
            return entry

    def priority(self, entry: HeldEntry, now: float) -> tuple[float, float, int]:
        """The sort key: smaller runs first."""
        if self.order == "fcfs":
            return (entry.accepted_at, 0.0, entry.seq)
        return (entry.estimate_s - self.ageing_per_s * (now - entry.accepted_at), entry.accepted_at, entry.seq)

    def peek(self) -> HeldEntry | None:
        """The job that would run next (exact: every held job is compared), None if nothing waits."""
        with self._cond:
            return self._best()

    def _best(self) -> HeldEntry | None:
        now = self.clock()
        waiting = [e for e in self._entries.values() if not e.running]
        return min(waiting, key=lambda e: self.priority(e, now)) if waiting else None

    def wait(self, timeout_s: float) -> bool:
        """Block until a job waits (or the timeout); True if one does."""
        with self._cond:
            return self._cond.wait_for(lambda: self._best() is not None, timeout=timeout_s)

    def start(self, entry: HeldEntry) -> bool:
        """Mark the entry running; False if it was dropped meanwhile."""
        with self._cond:
            if self._entries.get(entry.key) is not entry:
                return False
            entry.running = True
            return True

    def done(self, entry: HeldEntry) -> None:
        """Forget a finished (or abandoned) attempt."""
        with self._cond:
            self._entries.pop(entry.key, None)
            entry.path.unlink(missing_ok=True)

    def drop(self, job_ids: list[str]) -> list[str]:
        """Remove waiting entries of these jobs (the leader withdrew them); returns the keys removed."""
        wanted = set(job_ids)
        removed = []
        with self._cond:
            for key, entry in list(self._entries.items()):
                if entry.job_id in wanted and not entry.running:
                    del self._entries[key]
                    entry.path.unlink(missing_ok=True)
                    removed.append(key)
        return removed

    def snapshot(self) -> list[HeldJob]:
        """What the heartbeat reports: every held job with its estimate, the running one flagged, in run order."""
        with self._cond:
            now = self.clock()
            entries = sorted(self._entries.values(), key=lambda e: (not e.running, self.priority(e, now)))
            return [HeldJob(job_id=e.job_id, attempt=e.attempt, estimate_s=e.estimate_s, running=e.running) for e in entries]

    def __len__(self) -> int:
        with self._cond:
            return len(self._entries)
