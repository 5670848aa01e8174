"""Point reports kept on local disk until the leader acknowledges them, so a leader outage loses no measurement."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import httpx

from common.wire.jobs import PointReport
from follower.link.leader_client import LeaderClient, LeaderRejected, StaleAttempt

log = logging.getLogger(__name__)

# How long the end of an attempt keeps trying to deliver its buffered points before failing the attempt.
DELIVER_FOR_S = 600.0
RETRY_EVERY_S = 2.0


class Outbox:
    """A directory of report files: written (fsync) before sending, removed only once the leader answered."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def put(self, job_id: str, report: PointReport) -> Path:
        """Store one report durably (temp file, fsync, rename); raises OSError when the disk is full."""
        name = f"{job_id}-{report.attempt}-{report.result.point.index}.json"
        path = self.directory / name
        tmp = path.with_suffix(".tmp")
        data = json.dumps({"job_id": job_id, "report": report.model_dump(mode="json")}).encode()
        try:
            with tmp.open("wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    def pending(self, job_id: str | None = None) -> list[Path]:
        """Report files not yet acknowledged (of one job, or all), oldest first."""
        prefix = f"{job_id}-" if job_id else ""
        files = [p for p in self.directory.glob(f"{prefix}*.json")]
        return sorted(files, key=lambda p: p.stat().st_mtime_ns)

    def flush(self, client: LeaderClient, job_id: str | None = None) -> int:
        """Send what is pending; acknowledged (or refused for good) files are removed. Returns how many remain.

        A transient failure (leader unreachable, 5xx) stops the flush and keeps the files for the next one.
        """
        with self._lock:
            for path in self.pending(job_id):
                try:
                    doc = json.loads(path.read_bytes())
                    report = PointReport.model_validate(doc["report"])
                except (OSError, ValueError, KeyError) as exc:
                    log.error("dropping unreadable outbox file %s: %s", path.name, exc)
                    path.unlink(missing_ok=True)
                    continue
                try:
                    client.report_point(doc["job_id"], report)
                except (StaleAttempt, LeaderRejected) as exc:
                    # The leader will never take it (attempt requeued or cancelled): keeping it would block the rest.
                    log.warning("leader refused buffered point %s: %s", path.name, exc)
                except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                    log.warning("leader unreachable; %s stays buffered (%s)", path.name, type(exc).__name__)
                    break
                path.unlink(missing_ok=True)
            return len(self.pending(job_id))

    def deliver(self, client: LeaderClient, job_id: str, *, within_s: float = DELIVER_FOR_S) -> None:
        """Flush the job's points until none remain; raises TimeoutError if the leader stays away `within_s`."""
        deadline = time.monotonic() + within_s
        while self.flush(client, job_id):
            if time.monotonic() > deadline:
                left = len(self.pending(job_id))
                raise TimeoutError(f"{left} point result(s) of job {job_id} undelivered after {within_s:g} s")
            time.sleep(RETRY_EVERY_S)
