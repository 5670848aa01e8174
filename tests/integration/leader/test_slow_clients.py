"""Slow clients cannot hold the leader's connections: a request's headers have a deadline (leader/httpserver.py).
The attack run held 2,000 half-sent requests open for 60 s; uvicorn alone bounds only the idle time between a
connection's requests."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import httpx
import pytest

from benchfleet.stack import LocalStack
from tests.conftest import Service

HEADER_TIMEOUT_S = 1.0
WAIT_S = 15.0  # how long a test waits for the leader to close a connection: far past its deadline


@pytest.fixture(scope="module")
def leader_url(mongo_service: Service, redis_service: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real leader process (`python -m leader`, uvicorn as the leader serves): the deadline lives in its server."""
    stack = LocalStack(
        tmp_path_factory.mktemp("slow"),
        mongo_uri=mongo_service.url,
        redis_url=redis_service.url,
        db_name=f"slow_{uuid.uuid4().hex[:8]}",
        base_env={"PATH": "/usr/bin:/bin"},
        env={"BENCHFLEET_LEADER_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S)},
    )
    with stack:
        stack.start_leader()
        yield stack.url


def _closed_by_leader(sock: socket.socket) -> bool:
    """Whether the leader closed the connection (EOF) before WAIT_S, reading whatever it sent first."""
    sock.settimeout(WAIT_S)
    try:
        while chunk := sock.recv(4096):
            del chunk
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_half_sent_and_silent_connections_are_closed_at_the_header_deadline_while_others_are_served(leader_url: str) -> None:
    host, port = leader_url.removeprefix("http://").split(":")
    address = (host, int(port))
    silent = [socket.create_connection(address) for _ in range(20)]  # opened, nothing sent
    half = [socket.create_connection(address) for _ in range(40)]
    for sock in half:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: leader\r\nX-Slow: ")  # the headers never end
    try:
        assert httpx.get(f"{leader_url}/healthz", timeout=10).status_code == 200  # served meanwhile
        still_open = [i for i, sock in enumerate(silent + half) if not _closed_by_leader(sock)]
        assert still_open == [], f"{len(still_open)} of {len(silent + half)} slow connections were never closed"
    finally:
        for sock in silent + half:
            sock.close()
    # A kept-alive connection's later request has the deadline too (from its first byte), and a prompt one is answered.
    with socket.create_connection(address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: leader\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: leader\r\n")  # the second request's headers never end
        assert _closed_by_leader(sock)
