"""Heavy reads a few at a time: the limiter's counts, keys and exemptions, driven through its ASGI interface with an
app that holds each read until told (the seam: what the leader would do with the read)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from leader.api.readlimit import ReadLimit, client_key, limited
from leader.auth.tokens import SESSION_COOKIE


class _HeldApp:
    """Answers 200 once `release` is set; counts the reads that reached it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.reached = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.reached += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _scope(path: str, *, token: str | None = None, cookie: str | None = None, method: str = "GET") -> dict[str, Any]:
    headers = []
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if cookie:
        headers.append((b"cookie", f"theme=dark; {SESSION_COOKIE}={cookie}".encode()))
    return {"type": "http", "method": method, "path": path, "headers": headers}


async def _ask(limit: ReadLimit, scope: dict[str, Any]) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    await limit(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"]), sent[1]["body"]


def test_a_client_over_its_reads_and_everyone_over_the_leaders_are_refused_at_once_and_slots_come_back() -> None:
    async def scenario() -> None:
        app = _HeldApp()
        limit = ReadLimit(app, per_client=2, total=3)
        held = [asyncio.create_task(_ask(limit, _scope("/api/v1/jobs", token="ann"))) for _ in range(2)]
        await asyncio.sleep(0)
        status, headers, body = await _ask(limit, _scope("/api/v1/leaderboard", token="ann"))  # ann's third
        assert (status, headers[b"retry-after"]) == (429, b"1")
        assert json.loads(body)["message"].startswith("2 of your reads are in progress")
        held.append(asyncio.create_task(_ask(limit, _scope("/jobs", cookie="bob-session"))))  # the leader's third
        await asyncio.sleep(0)
        status, _, body = await _ask(limit, _scope("/leaderboard", token="cy"))
        assert status == 429 and "answering 3 reads" in json.loads(body)["message"]
        # What followers read and the probes pass whatever the count, and writes are never counted.
        app.release.set()
        for path in ("/healthz", "/api/v1/models/m/1/file", "/api/v1/jobs/j/target-credentials", "/api/v1/clock"):
            assert (await _ask(limit, _scope(path, token="ann")))[0] == 200
        assert (await _ask(limit, _scope("/api/v1/jobs", token="ann", method="POST")))[0] == 200
        assert [(await t)[0] for t in held] == [200, 200, 200]
        assert app.reached == 3 + 4 + 1  # the refused never reached the app
        assert (await _ask(limit, _scope("/api/v1/jobs", token="ann")))[0] == 200  # its slots came back

    asyncio.run(scenario())


def test_a_client_is_its_token_or_its_login_and_the_key_holds_no_secret() -> None:
    ann = client_key(_scope("/jobs", token="ann-secret"))
    assert ann == client_key(_scope("/api/v1/jobs", token="ann-secret")) != client_key(_scope("/jobs", token="bob"))
    assert "ann-secret" not in ann
    assert client_key(_scope("/jobs", cookie="s1")) != client_key(_scope("/jobs", cookie="s2"))
    assert client_key(_scope("/jobs")) == "anonymous"
    assert limited("/api/v1/jobs") and limited("/jobs/abc") and limited("/api/v1/compare")
    assert not limited("/api/v1/followers/f1/heartbeat") and not limited("/static/app.js")
