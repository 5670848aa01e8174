"""The generator's raw keep-alive HTTP/1.1 client against a real loopback server sending every framing it must handle."""

from __future__ import annotations

import asyncio
import time

import pytest

from follower.loadgen.rawhttp import HttpError, RawHttpSession

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
