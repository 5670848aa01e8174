"""The generator's raw keep-alive HTTP/1.1 client against a real loopback server sending every framing it must handle."""

from __future__ import annotations

import asyncio
import time

import pytest

from follower.loadgen.timing import BUSY_TAIL_NS, MARGIN_MAX_NS
from follower.protocols.transports.http1 import HttpError
from follower.protocols.transports.rawhttp import RawHttpSession

RESPONSES = {
    b"/cl": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
    b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwiki\r\n6\r\npedia \r\n0\r\n\r\n",
    b"/notfound": b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nno model!",
    b"/continue": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"/close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil-eof",
    b"/garbage": b"NOT HTTP AT ALL\r\n\r\n",
    b"/truncated": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
}


async def _serve(connections: list[int]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                lines = head.split(b"\r\n")
                length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                if path == b"/silent":
                    continue  # never answers: the client must time out
                writer.write(RESPONSES[path])
                await writer.drain()
                if path in (b"/close", b"/garbage", b"/truncated"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def _fetch_all(paths: list[str], timeout_s: float = 5.0) -> tuple[list[object], int]:
    connections: list[int] = []
    server = await _serve(connections)
    port = server.sockets[0].getsockname()[1]
    results: list[object] = []
    try:
        for path in paths:
            async with RawHttpSession(f"http://127.0.0.1:{port}{path}", timeout_s=timeout_s) as session:
                wire = session.wire(b'{"x": 1}')
                for _ in range(2):  # twice: the second request reuses the kept-alive connection when framing allows
                    before = time.monotonic_ns()
                    try:
                        status, first_ns, body = await session.fetch(wire)
                        assert before <= first_ns <= time.monotonic_ns()
                        results.append((status, body))
                    except (HttpError, OSError, TimeoutError) as exc:
                        results.append(type(exc).__name__)
    finally:
        server.close()
        await server.wait_closed()
    return results, len(connections)


def test_content_length_answers_reuse_one_connection() -> None:
    results, connections = _run(_fetch_all(["/cl"]))
    assert results == [(200, b"hello"), (200, b"hello")]
    assert connections == 1, "keep-alive: both requests on one connection"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/chunked", (200, b"wikipedia ")),
        ("/notfound", (404, b"no model!")),
        ("/continue", (200, b"ok")),
        ("/close", (200, b"until-eof")),
    ],
)
def test_framings_are_read_exactly(path: str, expected: tuple[int, bytes]) -> None:
    results, _ = _run(_fetch_all([path]))
    assert results == [expected, expected]


@pytest.mark.parametrize("path", ["/garbage", "/truncated"])
def test_unframeable_answers_fail_the_request_never_silently(path: str) -> None:
    results, _ = _run(_fetch_all([path]))
    assert all(isinstance(r, str) for r in results), results


def test_a_silent_server_times_out() -> None:
    results, _ = _run(_fetch_all(["/silent"], timeout_s=0.3))
    assert results == ["TimeoutError", "TimeoutError"]


def test_refused_connection_is_a_transport_error() -> None:
    async def go() -> str:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        async with RawHttpSession(f"http://127.0.0.1:{port}/x", timeout_s=2) as session:
            try:
                await session.fetch(session.wire(b"{}"))
            except OSError as exc:
                return type(exc).__name__
        return "answered"

    assert _run(go()) in {"ConnectionRefusedError", "OSError"}


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError, match="http://"):
        RawHttpSession("https://127.0.0.1:1/x")


async def _open_loop(path: str, n: int, gap_ns: int, timeout_s: float = 5.0, **kwargs: object):  # type: ignore[no-untyped-def]
    """The open loop's own raw path (dispatcher writes, callbacks record) against the framing server."""
    import numpy as np

    from follower.loadgen.openloop import run_open_loop
    from follower.protocols.transports.rawhttp import RawHttpTransport

    connections: list[int] = []
    server = await _serve(connections)
    port = server.sockets[0].getsockname()[1]
    try:
        offsets = np.arange(n, dtype=np.int64) * gap_ns
        async with RawHttpTransport(f"http://127.0.0.1:{port}{path}", max_concurrency=256, timeout_s=timeout_s) as transport:
            rec = await run_open_loop(transport, [b'{"x": 1}'], offsets, time.monotonic_ns() + 20_000_000, **kwargs)  # type: ignore[arg-type]
    finally:
        server.close()
        await server.wait_closed()
    return rec, len(connections)


@pytest.mark.parametrize(("path", "status"), [("/cl", 200), ("/chunked", 200), ("/notfound", 404), ("/continue", 200),
                                              ("/close", 200)])  # fmt: skip
def test_open_loop_records_every_framing_through_its_callbacks(path: str, status: int) -> None:
    rec, connections = _run(_open_loop(path, 20, 2_000_000))
    assert rec.status.tolist() == [status] * 20
    assert bool((rec.sent_ns >= rec.intended_ns).all() and (rec.first_byte_ns >= rec.sent_ns).all())
    assert bool((rec.done_ns >= rec.first_byte_ns).all())
    # Keep-alive: answered connections are reused (a new one opens only while none is idle); a closing server: one each.
    assert connections == 20 if path == "/close" else connections < 20, connections
    assert (rec.error_sample is None) == (status == 200), rec.error_sample


@pytest.mark.parametrize("timer", ["yield", "busy", "thread"])
def test_every_timer_sends_no_request_before_its_time_and_the_records_say_how_they_were_timed(timer: str) -> None:
    rec, _ = _run(_open_loop("/cl", 40, 500_000, timer=timer))
    assert rec.status.tolist() == [200] * 40 and bool((rec.sent_ns >= rec.intended_ns).all())
    assert rec.timer == timer
    if timer == "thread":
        assert (rec.wake_margin_ns, rec.spin_s) == (None, 0.0)
    else:
        assert rec.wake_margin_ns == (BUSY_TAIL_NS if timer == "busy" else MARGIN_MAX_NS)  # fewer than 64 wake-ups
        assert 0.0 <= rec.spin_s <= rec.wall_s


@pytest.mark.parametrize("path", ["/garbage", "/truncated"])
def test_open_loop_counts_unframeable_answers_as_errors(path: str) -> None:
    rec, _ = _run(_open_loop(path, 5, 2_000_000))
    assert rec.status.tolist() == [0] * 5 and rec.error_sample is not None


def test_open_loop_times_out_silent_requests_and_refused_connections() -> None:
    rec, _ = _run(_open_loop("/silent", 3, 1_000_000, timeout_s=0.3))
    assert rec.status.tolist() == [0] * 3 and "TimeoutError" in (rec.error_sample or "")
    assert bool(((rec.done_ns - rec.sent_ns) >= 300_000_000).all())


def test_open_loop_cap_waits_or_drops_and_says_so() -> None:
    # One request in flight at a time, all due at once: the rest wait their turn (send lag) or are dropped.
    waited, connections = _run(_open_loop("/cl", 10, 0, max_concurrency=1))
    assert waited.status.tolist() == [200] * 10 and int(waited.capped.sum()) == 9 and connections == 1
    assert bool((waited.sent_ns[1:] >= waited.done_ns[:-1]).all()), "each waited for the one before to be answered"
    dropped, _ = _run(_open_loop("/cl", 10, 0, max_concurrency=1, cap_policy="drop"))
    assert dropped.status.tolist() == [200] + [-2] * 9 and int(dropped.capped.sum()) == 9


async def _idle_closing_server(connections: list[int], keep_alive_header: bool) -> asyncio.Server:
    """Answers with `Keep-Alive: timeout=1` (or none) and, like a server closing an idle connection just as a request
    goes out on it, resets a connection that was idle over 1 s when the next request arrives, answering nothing."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        last = time.monotonic()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                if time.monotonic() - last > 1.0:
                    writer.transport.abort()  # a reset: the request is lost
                    return
                extra = b"Keep-Alive: timeout=1\r\n" if keep_alive_header else b""
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + extra + b"\r\nok")
                await writer.drain()
                last = time.monotonic()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _twice_with_an_idle_gap(keep_alive_header: bool) -> tuple[list[object], int]:
    connections: list[int] = []
    server = await _idle_closing_server(connections, keep_alive_header)
    port = server.sockets[0].getsockname()[1]
    results: list[object] = []
    try:
        async with RawHttpSession(f"http://127.0.0.1:{port}/", timeout_s=5) as session:
            wire = session.wire(b"{}")
            for gap in (0.0, 2.0):
                await asyncio.sleep(gap)  # the idle time is what this test is about
                try:
                    results.append((await session.fetch(wire))[0])
                except HttpError as exc:
                    results.append(str(exc))
    finally:
        server.close()
        await server.wait_closed()
    return results, len(connections)


def test_a_connection_idle_past_the_servers_keep_alive_is_not_reused() -> None:
    results, connections = _run(_twice_with_an_idle_gap(keep_alive_header=True))
    assert results == [200, 200] and connections == 2  # idle 2 s > 0.8 × the server's 1 s: a fresh connection


def test_a_reset_on_a_reused_connection_is_named_as_such() -> None:
    results, connections = _run(_twice_with_an_idle_gap(keep_alive_header=False))
    assert results[0] == 200 and connections == 1
    assert isinstance(results[1], str)
    assert results[1].startswith("a reused keep-alive connection closed before any answer (idle 2"), results[1]
