"""Whether PerfDB answers, known at all times: a probe every second on a client of its own, each ping with a 3 s
budget; two failed pings in a row call it down.

While the database is down, every request that needs it is answered at once with 503 and Retry-After (the middleware
below) instead of waiting out pymongo's server selection and failing as a 500. A request that runs into a connection
failure itself gets the same answer and counts as one failed ping: with a failed ping beside it the database is down,
alone it is not (a pooled connection reset under vLLM's load once answered every request 503 for a second). Followers
take a 5xx as "retry later" and keep their results on disk until the leader takes them (follower/link/outbox.py); the
Python client asks a read again (benchfleet/client.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pymongo import AsyncMongoClient
from pymongo.errors import ConnectionFailure, NetworkTimeout, PyMongoError, WaitQueueTimeoutError
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 1.0
# A ping slower than this fails; it takes PROBE_FAILURES failed pings in a row to call the database down. One slow ping
# under load (a busy host, the embedded database being a Python process) once answered every request 503 for a second.
PROBE_TIMEOUT_MS = 3000
PROBE_FAILURES = 2
RETRY_AFTER_S = 5
# Paths answered without the database (or that report on it themselves).
EXEMPT = ("/healthz", "/livez", "/metrics", "/static/", "/docs", "/openapi.json", "/login", "/favicon")


class DbHealth:
    """The database's state as the last probe (or a failed request) saw it."""

    def __init__(self, uri: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.client: AsyncMongoClient = AsyncMongoClient(
            uri,
            serverSelectionTimeoutMS=PROBE_TIMEOUT_MS,
            connectTimeoutMS=PROBE_TIMEOUT_MS,
            socketTimeoutMS=PROBE_TIMEOUT_MS,
        )
        self._clock = clock
        self.down_since: float | None = None
        self.failures = 0  # failed pings in a row
        self._failing_since: float | None = None  # the first failure of the run of failures now going on
        self._outages: deque[tuple[float, float]] = deque(maxlen=1000)  # (ended at, seconds) of each run of failures

    def deaf_s(self, now: float, window_s: float) -> float:
        """Seconds within the last `window_s` that the database was failing (from its first failed ping or request until
        a good ping): the leader answered heartbeats 503 then, unheard, so that time is not the followers' silence."""
        since = now - window_s
        deaf = sum(min(seconds, ended - since) for ended, seconds in self._outages if ended > since)
        if self._failing_since is not None:
            deaf += now - max(self._failing_since, since)
        return deaf

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def mark_down(self, why: str) -> None:
        if self.down_since is None:
            self.down_since = self._clock()
            log.warning("PerfDB unreachable (%s): answering 503 until it is back", why)

    def failed(self, why: str) -> None:
        """One failed ping, or one request that ran into a connection failure; PROBE_FAILURES in a row call it down."""
        self.failures += 1
        if self._failing_since is None:
            self._failing_since = self._clock()
        if self.failures >= PROBE_FAILURES:
            self.mark_down(f"{why}, {self.failures} failures in a row")

    async def probe(self) -> bool:
        try:
            await self.client.admin.command("ping")
        except PyMongoError as exc:
            self.failed(type(exc).__name__)
            return False
        self.answered()
        return True

    def answered(self) -> None:
        """A good ping: the failures in a row start again from none, and a down database is up."""
        self.failures = 0
        now = self._clock()
        if self._failing_since is not None:
            self._outages.append((now, now - self._failing_since))
            self._failing_since = None
        if self.down_since is not None:
            log.info("PerfDB reachable again after %.1f s", now - self.down_since)
            self.down_since = None

    async def run(self) -> None:
        while True:
            await self.probe()
            await asyncio.sleep(PROBE_INTERVAL_S)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()


def unavailable() -> JSONResponse:
    body = {"error": "unavailable", "message": "PerfDB (the results database) is unreachable; retry later", "field": "mongo"}
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})


def busy() -> JSONResponse:
    body = {"error": "busy", "message": "the leader is busy: this request waited too long for PerfDB; retry", "field": "mongo"}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


class _Guard:
    """The fast 503 while PerfDB is down (a pure ASGI layer: no task or stream per request)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            health: DbHealth | None = getattr(scope["app"].state, "dbhealth", None)
            if health is not None and health.down and not scope["path"].startswith(EXEMPT):
                await unavailable()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install(app: FastAPI) -> None:
    """The fast 503 while the database is down, and the same answer for a request that finds it down."""

    app.add_middleware(_Guard)

    async def _connection_failure(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, WaitQueueTimeoutError | NetworkTimeout):
            # Load, not an outage: the request waited too long for a pooled connection or for its answer. Only this
            # request is answered so; counted as failures, a room of readers once had the leader call a healthy
            # PerfDB down and answer 503 to everything, heartbeats included. A database that stopped answering is
            # still found by the probe, on its own client.
            return busy()
        health: DbHealth | None = getattr(request.app.state, "dbhealth", None)
        if health is not None:
            health.failed(type(exc).__name__)
        return unavailable()

    app.add_exception_handler(ConnectionFailure, _connection_failure)
