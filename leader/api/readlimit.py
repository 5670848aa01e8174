"""Reads a room of open consoles cannot turn into an outage: at most `per_client` of one client's and `total` of
everyone's heavy reads (job lists, the leaderboard, compare, results, the console's pages) run at once; one more is
answered at once with 429 and Retry-After, before it reaches the database. A client is its credential (the bearer
token or the login cookie, hashed: the limiter keeps no secret). The attack run had 200 readers of the jobs list, the
leaderboard and the pages saturate PerfDB and every answer wait seconds, heartbeats included.

What followers read (their tasks' models, data sets, target secrets, a shard's barrier, the clock) and the probes are
never limited here: a follower takes a 4xx as a refusal of its task, and those reads are few and cheap.
"""

from __future__ import annotations

import hashlib
import json
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


class ReadLimit:
    """The ASGI middleware holding the counts (one leader process, one event loop: no lock needed)."""

    def __init__(self, app: ASGIApp, *, per_client: int, total: int) -> None:
        self.app, self.per_client, self.total = app, per_client, total
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
