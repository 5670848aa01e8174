"""The sync and async clients build the same requests and read answers the same way (httpx MockTransport seam)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from benchfleet.client import ApiError, BenchfleetClient
from benchfleet.client_async import AsyncBenchfleetClient

ROW = {
    "id": "j1:0",
    "job_id": "j1",
    "job_name": "j",
    "attempt": 1,
    "index": 0,
    "model": "m:1",
    "backend": "triton",
    "hardware": "cpu",
    "follower_id": "f",
    "batch_size": 1,
    "pattern": "poisson",
    "rate": 10.0,
    "p99_ms": 3.5,
}
PAGE = {"rows": [ROW], "total": 1, "sort": "p99_ms", "order": "asc", "filters": ["backend=triton"], "limit": 5, "offset": 0}


def _handler(seen: list[httpx.Request]):  # type: ignore[no-untyped-def]
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/api/v1/leaderboard":
            return httpx.Response(200, json=PAGE)
        if request.url.path.endswith("/export"):
            return httpx.Response(200, content=b"index,p99\n0,3.5\n")
        if request.url.path == "/api/v1/jobs/missing":
            return httpx.Response(404, json={"error": "not_found", "message": "no job missing", "field": "job_id"})
        return httpx.Response(500, text="boom")

    return handle


def test_sync_and_async_send_identical_requests() -> None:
    sync_seen: list[httpx.Request] = []
    async_seen: list[httpx.Request] = []
    with BenchfleetClient("http://leader", "t" * 20, transport=httpx.MockTransport(_handler(sync_seen))) as client:
        rows = client.leaderboard(sort="p99", filters={"backend": "triton"}, limit=5)
        csv = client.export("j1", "csv")

    async def run() -> tuple[object, bytes]:
        async with AsyncBenchfleetClient("http://leader", "t" * 20, transport=httpx.MockTransport(_handler(async_seen))) as c:
            return await c.leaderboard(sort="p99", filters={"backend": "triton"}, limit=5), await c.export("j1", "csv")

    async_rows, async_csv = asyncio.run(run())
    assert rows == async_rows and rows.total == 1 and rows.rows[0].p99_ms == 3.5  # typed: a LeaderboardPage
    assert csv == async_csv == b"index,p99\n0,3.5\n"
    assert [str(r.url) for r in sync_seen] == [str(r.url) for r in async_seen]
    assert sync_seen[0].url.params.get_list("filter") == ["backend=triton"]
    assert sync_seen[0].url.params["sort"] == "p99" and sync_seen[1].url.params["format"] == "csv"
    assert sync_seen[0].headers["authorization"] == "Bearer " + "t" * 20


def test_errors_name_status_code_and_field() -> None:
    with BenchfleetClient("http://leader", "t" * 20, transport=httpx.MockTransport(_handler([]))) as client:
        with pytest.raises(ApiError) as missing:
            client.job("missing")
        with pytest.raises(ApiError) as broken:
            client.job("other")
    assert (missing.value.status, missing.value.code, missing.value.field) == (404, "not_found", "job_id")
    assert "field job_id" in str(missing.value)
    assert broken.value.status == 500 and "boom" in broken.value.message


UNAVAILABLE = {"error": "unavailable", "message": "PerfDB (the results database) is unreachable; retry later", "field": "mongo"}


def _flaky(seen: list[httpx.Request], unavailable: int, retry_after: str | None = "5"):  # type: ignore[no-untyped-def]
    """The leader's database away for the first `unavailable` requests (503, with Retry-After unless None)."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) <= unavailable:
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            return httpx.Response(503, json=UNAVAILABLE, headers=headers)
        return httpx.Response(200, json=PAGE if request.url.path == "/api/v1/leaderboard" else {"deleted": True})

    return handle


def test_a_read_answered_503_with_retry_after_is_asked_again_and_a_write_never() -> None:
    seen: list[httpx.Request] = []
    with BenchfleetClient("http://leader", "t" * 20, transport=httpx.MockTransport(_flaky(seen, 2))) as client:
        assert client.leaderboard().total == 1  # two 503s, then the answer
    assert [r.method for r in seen] == ["GET", "GET", "GET"]

    seen = []
    transport = httpx.MockTransport(_flaky(seen, 1))
    with BenchfleetClient("http://leader", "t" * 20, transport=transport) as client, pytest.raises(ApiError) as refused:
        client.cancel("j1")  # a write may have taken effect: its 503 is the caller's to handle
    assert refused.value.status == 503 and refused.value.field == "mongo" and len(seen) == 1

    seen = []
    transport = httpx.MockTransport(_flaky(seen, 1, None))
    with BenchfleetClient("http://leader", "t" * 20, transport=transport) as client, pytest.raises(ApiError):
        client.leaderboard()  # a 503 that does not say "retry later"
    assert len(seen) == 1

    async def run(seen: list[httpx.Request], budget_s: float) -> object:
        transport = httpx.MockTransport(_flaky(seen, 1_000))
        async with AsyncBenchfleetClient("http://leader", "t" * 20, transport=transport, unavailable_retry_s=budget_s) as c:
            return await c.leaderboard()

    seen = []
    with pytest.raises(ApiError) as gave_up:
        asyncio.run(run(seen, 2.5))  # never back within the budget: the last 503 is raised
    assert gave_up.value.status == 503 and 2 <= len(seen) <= 4
