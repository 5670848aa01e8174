"""The follower's local queue: Celery tasks are accepted into a durable holding queue, a run loop runs them in order.

Tier 2 of the scheduler. The Celery task only writes the job to disk (fsync, rename) and returns, so the message is
acked once the job is safe here; the run loop then picks, among everything held, by the order common/fairshare.py
defines (a scan over all held jobs, no buckets): its priority class first (urgent, normal, batch), then the shortest
estimate, with ageing: a job's key is its estimate minus `ageing_per_s` for every second it has waited. And a bound,
so no job waits without one: a job records at acceptance the work ahead of it (what FCFS would make it wait), and
once it has waited `wait_bound` times its FCFS turnaround (that work plus its own estimate) it runs before every job
not so overdue, the overdue ones first come first served. Teams' shares are the leader's to keep (its queue orders
by them when followers hold few jobs: `placement_lookahead`). bench/scheduler.py shows the longest wait within 2x
round-robin + FCFS's over heavy-tailed, bimodal and uniform mixes while the mean stays shortest-first's. FCFS (by
acceptance time) is the selectable baseline.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from common.fairshare import AGEING_PER_S, WAIT_BOUND, order_key
from common.wire.followers import HeldJob

log = logging.getLogger(__name__)

Order = Literal["sjf", "fcfs"]


@dataclass
class HeldEntry:
    """One held attempt: its ordering facts and the Celery payload it runs from."""

    job_id: str
    attempt: int
    estimate_s: float
    accepted_at: float  # the queue's clock (monotonic): waits are measured by it, so a wall-clock step changes no order
    seq: int
    payload: dict[str, Any]
    path: Path
    running: bool = False
    ahead_s: float = 0.0  # estimated work ahead of it when it was accepted: its wait under FCFS
    started_at: float | None = None  # when it started running (the running job's remaining work is counted ahead)
    priority: str = "normal"  # common.fairshare.Priority

    @property
    def key(self) -> str:
        return f"{self.job_id}-{self.attempt}"


def work_ahead(entries: Iterable[HeldEntry], now: float) -> float:
    """Estimated seconds of work before a newcomer under FCFS: every waiting job, and what the running one has left."""
    total = 0.0
    for entry in entries:
        if entry.running and entry.started_at is not None:
            total += max(0.0, entry.estimate_s - (now - entry.started_at))
        else:
            total += entry.estimate_s
    return total


class HoldingQueue:
    """Thread-safe, durable (one JSON file per attempt) queue of held jobs with exact SJF-with-ageing or FCFS order."""

    def __init__(
        self,
        directory: Path,
        *,
        order: Order = "sjf",
        ageing_per_s: float = AGEING_PER_S,
        wait_bound: float = WAIT_BOUND,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.order, self.ageing_per_s, self.wait_bound, self.clock, self.wall = order, ageing_per_s, wait_bound, clock, wall
        self._entries: dict[str, HeldEntry] = {}
        self._cond = threading.Condition()
        self._seq = 0
        self._load()

    def _load(self) -> None:
        """Pick up what an earlier agent process held (the leader decides on claim whether it is still ours)."""
        for path in sorted(self.directory.glob("*.json")):
            try:
                doc = json.loads(path.read_text())
                fields = {k: doc[k] for k in ("job_id", "attempt", "estimate_s", "seq", "payload")}
                # On disk the acceptance is a wall-clock time (the monotonic clock does not survive a reboot): how long
                # ago it was becomes a time on this process's clock once, at load.
                waited = max(0.0, self.wall() - float(doc.get("accepted_wall", doc.get("accepted_at", self.wall()))))
                entry = HeldEntry(
                    **fields,
                    accepted_at=self.clock() - waited,
                    path=path,
                    ahead_s=float(doc.get("ahead_s", 0.0)),
                    priority=_priority(doc["payload"]),
                )
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
            now = self.clock()
            entry = HeldEntry(
                job_id,
                attempt,
                float(payload["estimate_s"]),
                now,
                self._seq,
                payload,
                Path(),
                ahead_s=work_ahead(self._entries.values(), now),
                priority=_priority(payload),
            )
            self._seq += 1
            entry.path = self.directory / f"{entry.key}.json"
            keys = ("job_id", "attempt", "estimate_s", "seq", "payload", "ahead_s")
            doc = {**{k: getattr(entry, k) for k in keys}, "accepted_wall": self.wall()}
            tmp = entry.path.with_suffix(".tmp")
            with tmp.open("w") as fh:
                json.dump(doc, fh)
                fh.flush()
                os.fsync(fh.fileno())  # on disk before Celery acks the message
            tmp.replace(entry.path)
            self._entries[entry.key] = entry
            self._cond.notify_all()
            return entry

    def priority(self, entry: HeldEntry, now: float) -> tuple[float, ...]:
        """The sort key: smaller runs first (common/fairshare.py: order_key), then by acceptance."""
        if self.order == "fcfs":
            return (0, 0, 0, entry.accepted_at, entry.accepted_at, entry.seq)
        key = order_key(
            estimate_s=entry.estimate_s,
            waited_s=now - entry.accepted_at,
            ahead_s=entry.ahead_s,
            priority=entry.priority,
            ageing_per_s=self.ageing_per_s,
            wait_bound=self.wait_bound,
        )
        return (*key, entry.accepted_at, entry.seq)

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
            entry.running, entry.started_at = True, self.clock()
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


def _priority(payload: dict[str, Any]) -> str:
    """A job's priority class from its task's spec (a spec from before classes existed has none: normal)."""
    spec = payload.get("spec")
    return str((spec.get("priority") if isinstance(spec, dict) else None) or "normal")
