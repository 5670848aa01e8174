"""The leader's Prometheus metrics: jobs by state, queue per follower, placement latency, API latency."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pymongo.asynchronous.database import AsyncDatabase
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.logs import FOLLOWER_ID, JOB_ID
from common.wire.jobs import JobState
from leader.clock import FEED_OVERLAP
from leader.placement.book import JobBook
from leader.store import metrics as metrics_store
from leader.store.joblist import JobIndex

log = logging.getLogger(__name__)

# How often the PerfDB aggregates behind the gauges are refreshed (a scrape never waits on the database).
REFRESH_INTERVAL_S = 2.0
# States the placer's book holds in memory (queued, and active jobs with their follower); the rest are counted in PerfDB.
PLACEMENT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_JOB_PATH = re.compile(r"^/api/v1/jobs/([A-Za-z0-9_-]{1,64})(?:/|$)")
_FOLLOWER_PATH = re.compile(r"^/api/v1/followers/([A-Za-z0-9._-]{1,64})(?:/|$)")


def _template(scope: Scope) -> str:
    """The route template of a request (`/api/v1/jobs/{job_id}`), rebuilt from its path parameters: bounded labels."""
    if scope.get("route") is None:
        return "unmatched"
    by_value = {str(value): name for name, value in scope.get("path_params", {}).items()}
    return "/".join(f"{{{by_value[seg]}}}" if seg in by_value else seg for seg in scope["path"].split("/"))


class _Timing:
    """Times each HTTP request (to its last byte) by route template and status, and tags its logs with the job or
    follower it names. A pure ASGI layer: no task or stream per request (Starlette's BaseHTTPMiddleware cost the
    leader's loop about a tenth of its time per layer under load)."""

    def __init__(self, app: ASGIApp, metrics: LeaderMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        job = _JOB_PATH.match(path)
        follower = _FOLLOWER_PATH.match(path)
        job_token = JOB_ID.set(job.group(1)) if job else None
        follower_token = FOLLOWER_ID.set(follower.group(1)) if follower else None
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            template = _template(scope)
            if template != "/metrics":
                self.metrics.api.labels(scope["method"], template, str(status)).observe(time.perf_counter() - start)
            if job_token is not None:
                JOB_ID.reset(job_token)
            if follower_token is not None:
                FOLLOWER_ID.reset(follower_token)


class LeaderMetrics:
    """One registry per app, so several apps in one process (tests) do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Gauge(
            "benchfleet_leader_jobs",
            "Jobs by state (plain jobs and the parts of split jobs; a split job itself is not counted).",
            ["state"],
            registry=self.registry,
        )
        self.followers = Gauge(
            "benchfleet_leader_followers", "Registered followers by liveness state.", ["state"], registry=self.registry
        )
        self.queue_jobs = Gauge(
            "benchfleet_leader_follower_queue_jobs",
            "Jobs assigned to or running on a follower.",
            ["follower_id"],
            registry=self.registry,
        )
        self.queue_seconds = Gauge(
            "benchfleet_leader_follower_queue_seconds",
            "Summed estimated seconds of a follower's assigned and running jobs.",
            ["follower_id"],
            registry=self.registry,
        )
        self.placement = Histogram(
            "benchfleet_leader_placement_seconds",
            "Placement latency: from a job (or a new attempt) entering the queue to its assignment.",
            buckets=PLACEMENT_BUCKETS,
            registry=self.registry,
        )
        self.placements = Counter("benchfleet_leader_placements", "Jobs assigned to a follower.", registry=self.registry)
        self.api = Histogram(
            "benchfleet_leader_api_request_seconds",
            "API request latency by route template.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        # Placements up to this time are counted; the first refresh counts only placements made after the start.
        self._placed_until = self._read_from = datetime.now(UTC)
        self.refresh_errors = Counter(
            "benchfleet_leader_metrics_refresh_failures", "Failed gauge refreshes.", registry=self.registry
        )

    async def refresh(self, db: AsyncDatabase, index: JobIndex, book: JobBook | None = None) -> None:
        """Refresh the gauges: jobs by state from the jobs list's index (leader.store.joblist: no count decodes every
        finished job), queues from the placer's book when it has loaded, else PerfDB."""
        await index.refresh(db)
        by_state = {state.value: 0 for state in JobState} | index.count_by_state()
        for state, n in by_state.items():
            self.jobs.labels(state).set(n)
        followers = await metrics_store.followers_by_state(db)
        counts: dict[str, int] = {}
        for state in followers.values():
            counts[state] = counts.get(state, 0) + 1
        for state in {*counts, "ready", "busy", "missing"}:
            self.followers.labels(state).set(counts.get(state, 0))
        if book is not None:
            queues = {fid: (load.jobs, load.seconds) for fid, load in list(book.loads.items())}
        else:
            queues = await metrics_store.queues_by_follower(db)
        for follower_id in {*followers, *queues}:
            n, seconds = queues.get(follower_id, (0, 0.0))
            self.queue_jobs.labels(follower_id).set(n)
            self.queue_seconds.labels(follower_id).set(seconds)
        # The jobs changed since FEED_OVERLAP before the last read began (not since the last placement: with none for a
        # while, that was every job changed since, history and all, every refresh).
        started = datetime.now(UTC)
        placed = await metrics_store.placements_since(db, since=self._placed_until, changed_since=self._read_from)
        self._read_from = started - FEED_OVERLAP
        for assigned_at, waited_s in placed:
            self.placement.observe(waited_s)
            self.placements.inc()
            self._placed_until = max(self._placed_until, assigned_at)

    async def run(
        self,
        db: AsyncDatabase,
        index: JobIndex,
        interval_s: float = REFRESH_INTERVAL_S,
        book: Callable[[], JobBook | None] | None = None,
    ) -> None:
        """Refresh forever; a failed refresh is counted and logged, and the gauges keep their last values.

        `book` returns the placer's in-memory book (None until its first load): queue gauges then come from memory.
        """
        while True:
            try:
                await self.refresh(db, index, book() if book is not None else None)
            except Exception as exc:
                self.refresh_errors.inc()
                log.warning("metrics refresh failed: %s", exc)
            await asyncio.sleep(interval_s)

    def install(self, app: FastAPI) -> None:
        """Add the /metrics route and the middleware that times requests and tags logs with job/follower ids."""

        @app.get("/metrics", include_in_schema=False)
        async def metrics() -> Response:
            # Aggregate counts only, no ids of users or secrets: readable without a token, as Prometheus expects.
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        app.add_middleware(_Timing, metrics=self)
