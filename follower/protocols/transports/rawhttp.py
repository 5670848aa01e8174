"""A minimal HTTP/1.1 keep-alive POST client on asyncio Protocols, for the open-loop generator's hot path.

aiohttp spends ~150-200 µs of CPU per request on a generator core (request/response objects, header multidicts,
tracing signals, timeout contexts, the `async with` response); the issue's floor is ≤ 200 µs for everything.
This client does only what the generator needs: one prebuilt request (head + body bytes) per POST over pooled
keep-alive connections, the status code, the time the first response byte arrived, and the body. Responses are
framed by Content-Length, chunked transfer-encoding, or the connection closing; 1xx interim answers are skipped.
Anything it cannot frame fails that request as a transport error (and the connection is dropped), never silently.
"""

from __future__ import annotations

import asyncio
import select
import time
from typing import Any, cast
from urllib.parse import urlsplit

from follower.protocols.transports.base import NO_CREDENTIALS, Answer, Credentials, Reply, Transport, http_answer
from follower.protocols.transports.http1 import HttpError, parse_head

_monotonic_ns = time.monotonic_ns


# How long a pooled connection may sit idle before it is closed rather than reused: below the 5 s keep-alive of
# uvicorn, Node and Gunicorn (a server closing an idle connection as a request goes out on it resets that request),
# and below the server's own `Keep-Alive: timeout=N` when it sends one (IDLE_SHARE of it).
IDLE_LIMIT_NS = 4_000_000_000
IDLE_SHARE = 0.8
# A connection the server closes this soon after a streamed answer ended was ended with the answer (llama.cpp's way),
# not for sitting idle past the server's keep-alive timeout (seconds).
STREAM_END_NS = 100_000_000


def _readable(conn: ConnBase) -> bool:
    """Whether an idle connection has bytes or an end waiting that its loop has not read yet: the server closed it
    (llama.cpp closes one after every streamed answer, the end arriving with the answer's last bytes) or sent what no
    request asked for. Either way it is not reused. One poll of its socket, as curl checks a connection before reuse."""
    sock = conn.transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        poller = select.poll()  # not select(): a follower holds more than its 1,024 descriptors
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class ConnBase(asyncio.Protocol):
    """What every keep-alive connection of the pool shares: its transport, and failing the request it carries."""

    __slots__ = ("pool", "transport", "waiter", "closed", "idle_since", "idle_limit_ns", "reused", "port", "streamed")
    pool: RawHttpSession
    transport: asyncio.Transport
    waiter: Any  # the request on the wire's future (or future-like waiter); None between requests
    closed: bool
    idle_since: int  # monotonic ns when it last went back to the pool
    idle_limit_ns: int  # how long it may stay idle and still be reused
    reused: bool  # the request on it is not the connection's first
    streamed: bool  # its last answer was an event stream: a server may close the connection after one (llama.cpp does)
    port: int  # its local port (-1: not a TCP socket): the wire audit pairs each request with its connection's

    def mid_answer(self, exc: Exception | None) -> str:
        """What a connection closed before its answer completed says: a reused connection closed before any byte of
        the answer is a keep-alive race (the client's pool), not the server's failure to answer."""
        if self.reused and self.first_ns == 0:  # type: ignore[attr-defined]
            self.learn_stream_end()
            idle_ms = (_monotonic_ns() - self.idle_since) / 1e6
            return f"a reused keep-alive connection closed before any answer (idle {idle_ms:.0f} ms): {exc or 'EOF'}"
        return f"server closed the connection mid-answer ({exc or 'EOF'})"

    def learn_stream_end(self) -> None:
        """The server closed this connection: if its last answer was a stream that ended just before, the server ends
        connections after streamed answers, and the pool stops reusing them."""
        if self.streamed and _monotonic_ns() - self.idle_since < STREAM_END_NS:
            self.pool.streams_end_connections = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP connection's transport (uvloop's is not an asyncio.Transport subclass, but it has its methods).
        self.transport = cast(asyncio.Transport, transport)
        sockname = transport.get_extra_info("sockname")
        self.port = sockname[1] if isinstance(sockname, tuple) and len(sockname) >= 2 else -1

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost completes an answer framed by the close

    def _fail(self, message: str) -> None:
        waiter, self.waiter = self.waiter, None
        self.closed = True
        self.transport.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(HttpError(message))


class _Conn(ConnBase):
    __slots__ = (
        "buf",
        "first_ns",
        "status",
        "body_at",
        "length",
        "chunked",
        "close_after",
    )

    # Set by connection_made, which asyncio calls before create_connection returns the protocol to anyone.
    transport: asyncio.Transport

    def __init__(self, pool: RawHttpSession) -> None:
        self.pool = pool
        self.buf = bytearray()
        self.waiter = None
        self.first_ns = 0
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.body_at = -1  # offset of the body in buf once the head is parsed
        self.length = -1  # Content-Length, or -1 (chunked / until close)
        self.chunked = False
        self.close_after = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            self.waiter = None
            if self.body_at >= 0 and self.length < 0 and not self.chunked:  # body framed by the close
                waiter.set_result((self.status, self.first_ns, bytes(self.buf[self.body_at :])))
            else:
                waiter.set_exception(HttpError(self.mid_answer(exc)))

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection's framing is lost
            self.closed = True
            self.transport.close()
            return
        if self.first_ns == 0:
            self.first_ns = _monotonic_ns()
        self.buf += data
        self._parse()

    def _parse(self) -> None:
        buf = self.buf
        if self.body_at < 0:
            try:
                head = parse_head(buf)
            except HttpError as exc:
                self._fail(str(exc))
                return
            if head is None:
                return
            self.status, self.body_at, self.length, self.chunked, self.close_after, keep_alive_ns = head
            self.pool.keep_alive(self, keep_alive_ns)
        if self.length >= 0:
            end = self.body_at + self.length
            if len(buf) < end:
                return
            if len(buf) > end:
                self._fail("bytes after the HTTP answer's body (pipelining is not used)")
                return
            self._complete(bytes(buf[self.body_at : end]))
        elif self.chunked:
            body = self._dechunk()
            if body is not None:
                self._complete(body)
        # else: body framed by the connection closing (connection_lost)

    def _dechunk(self) -> bytes | None:
        buf, at, out = self.buf, self.body_at, bytearray()
        while True:
            line_end = buf.find(b"\r\n", at)
            if line_end < 0:
                return None
            try:
                size = int(bytes(buf[at:line_end]).split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._fail("malformed chunk size")
                return None
            at = line_end + 2
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", at - 2)  # no trailers: the empty line right after
                if trailer_end < 0:
                    return None
                if trailer_end + 4 != len(buf):
                    self._fail("bytes after the chunked HTTP answer")
                    return None
                return bytes(out)
            if len(buf) < at + size + 2:
                return None
            out += buf[at : at + size]
            at += size + 2

    def _complete(self, body: bytes) -> None:
        waiter, self.waiter = self.waiter, None
        status, first_ns = self.status, self.first_ns
        self.buf = bytearray()
        self.first_ns = 0
        close = self.close_after
        self._reset()
        if close:
            self.closed = True
            self.transport.close()
        else:
            self.pool.release(self)
        if waiter is not None and not waiter.done():
            waiter.set_result((status, first_ns, body))


class RawHttpSession:
    """Pooled keep-alive HTTP/1.1 connections to one http:// origin; `fetch(wire)` sends prebuilt request bytes.

    The generator caps requests in flight itself (max_concurrency), so the pool opens a connection whenever none
    is idle and never has more open than requests ever were in flight at once.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 30.0,
        conn_factory: Any = None,
        headers: tuple[tuple[str, str], ...] = (),
        address: str | None = None,
    ) -> None:
        parts = urlsplit(url)
        # A target's own headers (a secret's), written into every request; CR/LF were refused when it was stored.
        self.extra_head = "".join(f"{name}: {value}\r\n" for name, value in headers)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"RawHttpSession speaks plain http:// only, not {url!r}")
        self.host = address or parts.hostname  # the checked address a connection goes to (the name stays in Host)
        self.port = parts.port or 80
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        netloc = parts.netloc.rsplit("@", 1)[-1]
        self.host_header = netloc
        self.timeout_s = timeout_s
        # The protocol of each connection (one that completes its waiter with its own kind of result, e.g. a stream).
        self.conn_factory = conn_factory or _Conn
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._closed = False
        # The server was seen to close a connection after a streamed answer (llama.cpp does after every one, though
        # it says keep-alive): from then on a connection that carried one is closed, never reused, so no request is
        # written on a connection the server is closing (a fresh one costs a loopback connect).
        self.streams_end_connections = False

    def wire(self, body: bytes, content_type: str = "application/json") -> bytes:
        """The full request bytes for POSTing `body` (build once per body, reuse per request)."""
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host_header}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nAccept: */*\r\n{self.extra_head}\r\n"
        )
        return head.encode("latin-1") + body

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: self.conn_factory(self), self.host, self.port)
        conn.idle_since, conn.idle_limit_ns, conn.reused, conn.streamed = 0, IDLE_LIMIT_NS, False, False
        self._all.add(conn)
        return conn

    def keep_alive(self, conn: ConnBase, timeout_ns: int) -> None:
        """The server's Keep-Alive timeout, read from an answer's head: the connection's idle limit goes below it."""
        if timeout_ns >= 0:
            conn.idle_limit_ns = min(IDLE_LIMIT_NS, int(timeout_ns * IDLE_SHARE))

    def release(self, conn: ConnBase) -> None:
        """A connection whose answer completed goes back to the pool, idle from now."""
        conn.idle_since = _monotonic_ns()
        self._idle.append(conn)  # type: ignore[arg-type]

    def _take_idle(self) -> _Conn | None:
        """An idle connection to reuse now, or None; connections closed, or idle past their limit, are dropped."""
        idle, now = self._idle, _monotonic_ns()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since <= conn.idle_limit_ns:
                if not (conn.streamed and _readable(conn)):
                    conn.reused = True
                    return conn
                conn.learn_stream_end()
            if not conn.closed:
                conn.closed = True
                conn.transport.close()
            self._all.discard(conn)
        return None

    async def fetch(self, wire: bytes) -> Any:
        """Send one request; (status, monotonic ns of the answer's first byte, body), or what the connection protocol
        completes with. Raises OSError / TimeoutError."""
        if self._closed:
            raise HttpError("session closed")
        conn = self._take_idle()
        if conn is None:
            conn = await asyncio.wait_for(self._connect(), self.timeout_s)  # TimeoutError, like aiohttp's total
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        conn.waiter = waiter
        conn.transport.write(wire)
        handle = loop.call_later(self.timeout_s, _expire, conn, waiter, self.timeout_s)
        try:
            return await waiter
        except asyncio.CancelledError:
            conn.waiter = None  # the answer may still come: drop the connection rather than misframe it
            conn.closed = True
            conn.transport.close()
            raise
        finally:
            handle.cancel()
            if conn.closed:
                self._all.discard(conn)

    def send_now(self, wire: bytes, waiter: Any) -> _Conn | None:
        """Write a request on an idle keep-alive connection now; `waiter` (future-like) gets the answer. None: no idle one.

        The open loop sends from its dispatcher with this, so a request leaves at its time without waiting for a task
        to be scheduled; `waiter` needs done(), set_result((status, first_ns, body)) and set_exception(exc).
        """
        if self._closed:
            raise HttpError("session closed")
        conn = self._take_idle()
        if conn is None:
            return None
        conn.waiter = waiter
        conn.transport.write(wire)
        return conn

    async def connect_and_send(self, wire: bytes, waiter: Any) -> _Conn:
        """Open a new connection (bounded by the timeout) and write the request on it; `waiter` as for send_now."""
        if self._closed:
            raise HttpError("session closed")
        conn = await asyncio.wait_for(self._connect(), self.timeout_s)
        conn.waiter = waiter
        conn.transport.write(wire)
        return conn

    async def close(self) -> None:
        self._closed = True
        for conn in list(self._all):
            conn.transport.close()
        self._all.clear()
        self._idle.clear()

    async def __aenter__(self) -> RawHttpSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _expire(conn: _Conn, waiter: Any, timeout_s: float) -> None:
    """A request's timeout: drop its connection (its answer may still come and misframe it) and fail the waiter."""
    if not waiter.done():
        conn.waiter = None
        conn.closed = True
        conn.transport.close()
        waiter.set_exception(TimeoutError(f"no HTTP answer within {timeout_s:g}s"))


class RawHttpTransport(Transport):
    """The open loop's plain-http:// transport: prebuilt request bytes written by the dispatcher itself, answers
    delivered through the connection's callbacks (no task per request: the dispatcher -> task hop was measured at p99
    0.65-12 ms of send lag at 2,000-5,000 req/s, and is 0.01-0.02 ms this way; bench/send_lag_causes.py)."""

    conn_factory: Any = None  # the connection protocol (None: plain answers, read whole)

    def __init__(self, url: str, *, max_concurrency: int, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
        super().__init__(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
        self.session = RawHttpSession(url, timeout_s, self.conn_factory, headers=credentials.headers, address=credentials.address)
        self._waiters: set[_Waiter] = set()

    def encode(self, body: bytes) -> bytes:
        return self.session.wire(body)

    def answer_of(self, result: Any) -> Answer:
        """The Answer of what a connection completed with: (status, first byte ns, body) read whole just now."""
        return http_answer(*result)

    async def request(self, encoded: Any) -> Answer:
        return self.answer_of(await self.session.fetch(encoded))

    def begin(self, encoded: Any, reply: Reply) -> None:
        """Write the request on an idle connection now, or open one in a task; the answer comes to the waiter."""
        waiter = _Waiter(self, reply)
        self._waiters.add(waiter)
        reply.sent(_monotonic_ns())
        try:
            conn = self.session.send_now(encoded, waiter)
        except OSError as exc:
            waiter.set_exception(exc)
            return
        if conn is None:
            task = asyncio.get_running_loop().create_task(self._connect_send(waiter, encoded))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            waiter.arm(conn)

    async def _connect_send(self, waiter: _Waiter, encoded: bytes) -> None:
        try:
            conn = await self.session.connect_and_send(encoded, waiter)
        except (TimeoutError, OSError) as exc:
            waiter.set_exception(exc)
            return
        if not waiter.finished:
            waiter.arm(conn)

    async def abort(self) -> None:
        for waiter in list(self._waiters):
            waiter.finish()
        await super().abort()

    async def close(self) -> None:
        await self.session.close()


class _Waiter:
    """One raw request awaiting its answer: the future-like object a connection completes, without a task."""

    __slots__ = ("transport", "reply", "timer", "finished")

    def __init__(self, transport: RawHttpTransport, reply: Reply) -> None:
        self.transport, self.reply = transport, reply
        self.timer: asyncio.TimerHandle | None = None
        self.finished = False

    def arm(self, conn: _Conn) -> None:
        self.reply.via(conn.port)
        timeout_s = self.transport.timeout_s
        self.timer = asyncio.get_running_loop().call_later(timeout_s, _expire, conn, self, timeout_s)

    def finish(self) -> None:
        self.finished = True
        if self.timer is not None:
            self.timer.cancel()
        self.transport._waiters.discard(self)

    def done(self) -> bool:
        return self.finished

    def set_result(self, result: Any) -> None:
        if not self.finished:
            self.finish()
            self.reply.answered(self.transport.answer_of(result))

    def set_exception(self, exc: BaseException) -> None:
        if not self.finished:
            self.finish()
            self.reply.failed(exc)
