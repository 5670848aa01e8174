"""HTTP(S) through aiohttp: the general client (TLS, proxies, any framing), at ~150-200 µs of CPU per request."""

from __future__ import annotations

import socket
import time
from typing import Any

import aiohttp
import aiohttp.abc

from follower.protocols.transports.base import NO_CREDENTIALS, Answer, Credentials, Transport, http_answer

_HEADERS = {"Content-Type": "application/json"}


class _Pinned(aiohttp.abc.AbstractResolver):
    """Every name resolves to the one address the target was checked at (common/egress.py)."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[Any]:
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return [{"hostname": host, "host": self.address, "port": port, "family": family, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        return None


class AiohttpTransport(Transport):
    """POSTs each body to the URL over a pool of at most `max_concurrency` keep-alive connections."""

    errors = (TimeoutError, aiohttp.ClientError, OSError)

    def __init__(self, url: str, *, max_concurrency: int, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
        super().__init__(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
        tls = credentials.ssl_context() if url.startswith("https://") else None
        connector = aiohttp.TCPConnector(
            limit=max_concurrency,
            limit_per_host=max_concurrency,
            force_close=False,
            ssl=tls or True,
            resolver=_Pinned(credentials.address) if credentials.address else None,
        )
        self.headers = {**_HEADERS, **dict(credentials.headers)}
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            # Nothing of ours needs cookies or redirects; skipping them saves per-request work.
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    async def request(self, encoded: Any) -> Answer:
        async with self.session.post(self.url, data=encoded, headers=self.headers) as response:
            first_ns = time.monotonic_ns()
            payload = await response.read()
            return http_answer(response.status, first_ns, payload)

    async def close(self) -> None:
        await self.session.close()
