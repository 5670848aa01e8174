"""One connection failure answers its own request 503 but does not call PerfDB down for everybody; a second failure in
a row does (a ping's or a request's), and a good ping ends it."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from pymongo.errors import AutoReconnect, NetworkTimeout, WaitQueueTimeoutError

from leader import dbhealth
from leader.dbhealth import DbHealth


def _app(health: DbHealth, failures: list[bool]) -> FastAPI:
    app = FastAPI()
    app.state.dbhealth = health
    dbhealth.install(app)

    @app.get("/api/v1/thing")
    async def thing() -> dict[str, bool]:
        if failures and failures.pop(0):
            raise AutoReconnect("connection reset under load")
        return {"ok": True}

    return app


def test_one_reset_connection_fails_its_request_only_and_two_in_a_row_call_the_database_down() -> None:
    health = DbHealth("mongodb://127.0.0.1:9/?directConnection=true")  # never contacted: the client connects lazily
    failures = [True, False, True, True, False]
    with TestClient(_app(health, failures)) as client:
        first = client.get("/api/v1/thing")
        assert first.status_code == 503 and first.json()["field"] == "mongo" and first.headers["Retry-After"] == "5"
        assert not health.down and health.failures == 1
        health.answered()  # the probe's next good ping
        assert client.get("/api/v1/thing").status_code == 200
        assert client.get("/api/v1/thing").status_code == 503 and not health.down
        assert client.get("/api/v1/thing").status_code == 503 and health.down  # the second failure in a row
        # Down: answered at once, without running the route (its next answer would have been a success).
        assert client.get("/api/v1/thing").status_code == 503 and failures == [False]
        health.answered()
        assert client.get("/api/v1/thing").status_code == 200 and not health.down


def test_a_failed_ping_and_a_failed_request_together_call_it_down() -> None:
    health = DbHealth("mongodb://127.0.0.1:9/?directConnection=true")
    health.failed("ServerSelectionTimeoutError")
    assert not health.down
    health.failed("AutoReconnect")
    assert health.down and health.down_since is not None


def test_requests_that_waited_too_long_under_load_are_not_the_databases_failure() -> None:
    """Two hundred readers once made requests wait past the pool's queue timeout; each wait counted as a failed ping,
    so the leader called a healthy PerfDB down and answered 503 to everything, heartbeats included. A wait for a pooled
    connection or a slow answer fails its own request only (503 busy, Retry-After 1), however many in a row."""
    health = DbHealth("mongodb://127.0.0.1:9/?directConnection=true")
    app = FastAPI()
    app.state.dbhealth = health
    dbhealth.install(app)
    waits: list[Exception] = [WaitQueueTimeoutError("pool queue"), NetworkTimeout("slow answer")] * 5

    @app.get("/api/v1/thing")
    async def thing() -> dict[str, bool]:
        if waits:
            raise waits.pop(0)
        return {"ok": True}

    with TestClient(app) as client:
        for _ in range(10):
            answer = client.get("/api/v1/thing")
            assert answer.status_code == 503 and answer.json()["error"] == "busy" and answer.headers["Retry-After"] == "1"
        assert not health.down and health.failures == 0
        assert client.get("/api/v1/thing").status_code == 200
