"""Reads a room of open consoles cannot turn into an outage: at most `per_client` of one client's and `total` of
everyone's heavy reads (job lists, the leaderboard, compare, results, the console's pages) run at once; one more is
answered at once with 429 and Retry-After, before it reaches the database. A client is its credential (the bearer
token or the login cookie, hashed: the limiter keeps no secret). The attack run had 200 readers of the jobs list, the
leaderboard and the pages saturate PerfDB and every answer wait seconds, heartbeats included.

A read is also refused while the leader's event loop runs late (LoopLag: what is due runs more than `shed_lag_s`
after its time) and other reads are in progress: the leader is then busier than its cores, and what waits behind the
reads is every heartbeat, submission and result of the fleet. A read with no other in progress is answered: a leader
late of its own start or of one slow page is not a room of readers. The limit holds on the leader's own measure of
itself, not a count tuned to one machine: on a 2-core host 32 reads at once made each heartbeat wait seconds
(bench/leader_load.py).

What followers read (their tasks' models, data sets, target secrets, a shard's barrier, the clock) and the probes are
never limited here: a follower takes a 4xx as a refusal of its task, and those reads are few and cheap.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter

from starlette.types import ASGIApp, Receive, Scope, Send

from leader.auth.tokens import SESSION_COOKIE

RETRY_AFTER_S = 1
_READS = frozenset({"GET", "HEAD"})
# Paths (or their starts) that are never limited: probes, static assets, the login page, and what followers read.
_FREE_PREFIXES = ("/healthz", "/livez", "/metrics", "/static/", "/login", "/api/v1/clock", "/api/v1/followers/")
_FOLLOWER_READS = ("/target-credentials", "/shards/")
_FOLLOWER_FETCHES = ("/api/v1/models/", "/api/v1/data/")  # a model's or a data set's metadata and bytes


def limited(path: str) -> bool:
    """Whether a GET of `path` counts against the read limits."""
    if path.startswith(_FREE_PREFIXES) or path.startswith(_FOLLOWER_FETCHES):
        return False
    return not any(part in path for part in _FOLLOWER_READS)


def client_key(scope: Scope) -> str:
    """Who is reading: a digest of the request's bearer token, else of its login cookie, else "anonymous"."""
    headers = dict(scope.get("headers") or ())
    credential = headers.get(b"authorization", b"")
    if not credential:
        cookies = headers.get(b"cookie", b"").decode("latin-1")
        credential = next(
            (c.split("=", 1)[1].encode() for c in cookies.split(";") if c.strip().startswith(f"{SESSION_COOKIE}=")), b""
        )
    return hashlib.blake2b(credential, digest_size=12).hexdigest() if credential else "anonymous"


class LoopLag:
    """How late the event loop runs what is due because of its own work, sampled every `every_s`: a sample's lateness
    counts in the share of it the loop's thread spent on the CPU (a leader the host did not schedule, or one blocked
    waiting, is not busy: its reads are not what to refuse), averaged with weight `weight` per sample (one slow page is
    not a loaded leader; a loop late sample after sample is)."""

    def __init__(self, *, every_s: float = 0.05, weight: float = 0.2) -> None:
        self.every_s, self.weight = every_s, weight
        self.lag_s = 0.0  # the average
        self.last_s = 0.0  # the last sample

    def record(self, late_s: float) -> None:
        """One sample: the loop ran a timer `late_s` after it was due, of its own doing."""
        self.last_s = max(0.0, late_s)
        self.lag_s += self.weight * (self.last_s - self.lag_s)

    async def run(self) -> None:
        """Sample forever (a task of the leader's lifespan)."""
        loop = asyncio.get_running_loop()
        while True:
            start, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(self.every_s)
            now = loop.time()
            busy = (time.thread_time() - cpu) / max(now - start, 1e-6)
            self.record((now - start - self.every_s) * min(1.0, busy))


class ReadLimit:
    """The ASGI middleware holding the counts (one leader process, one event loop: no lock needed)."""

    def __init__(self, app: ASGIApp, *, per_client: int, total: int, lag: LoopLag | None = None, shed_lag_s: float = 0.1) -> None:
        self.app, self.per_client, self.total = app, per_client, total
        self.lag, self.shed_lag_s = lag, shed_lag_s
        self._by_client: Counter[str] = Counter()
        self._running = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _READS or not limited(scope["path"]):
            await self.app(scope, receive, send)
            return
        key = client_key(scope)
        if self._by_client[key] >= self.per_client:
            await _refuse(send, f"{self.per_client} of your reads are in progress (the most at once): ask again shortly")
            return
        if self._running >= self.total:
            await _refuse(send, f"the leader is answering {self.total} reads, its most at once: ask again shortly")
            return
        if self._running and self.lag is not None and self.lag.lag_s > self.shed_lag_s:
            late_ms = self.lag.lag_s * 1000
            await _refuse(send, f"the leader is busy (running {late_ms:.0f} ms late): reads wait, the fleet first; ask again")
            return
        self._by_client[key] += 1
        self._running += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._running -= 1
            self._by_client[key] -= 1
            if not self._by_client[key]:
                del self._by_client[key]


async def _refuse(send: Send, message: str) -> None:
    body = json.dumps({"error": "too_many_requests", "message": message, "field": None}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
