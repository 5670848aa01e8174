"""The leader's HTTP protocol: uvicorn's, with a deadline for a request's headers.

uvicorn bounds the idle time between a connection's requests (keep-alive), but not the time a client takes to send
a request's headers: the attack run held 2,000 connections open for 60 s by sending half a request line each. Here
every connection must complete its first request's headers within `header_timeout_s` of opening, and each later
request's within as long of its first byte; a connection that does not is closed (it never reached the app).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _HeaderDeadline(HttpToolsProtocol):
    header_timeout_s: float = 10.0

    _deadline: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # from the connection's opening, not its first byte: a silent connection is bounded too

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()  # a later request on a kept-alive connection: from its first byte

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def header_deadline_protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's `http` protocol class with this header deadline."""
    return type("HeaderDeadlineProtocol", (_HeaderDeadline,), {"header_timeout_s": header_timeout_s})
