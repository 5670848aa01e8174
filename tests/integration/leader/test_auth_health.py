"""Bearer-token auth on every API route, open health and docs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration.leader.conftest import ADMIN, FOLLOWER, Leader, follower_info

USER_ROUTES = [
    ("GET", "/api/v1/jobs"),
    ("POST", "/api/v1/jobs"),
    ("GET", "/api/v1/jobs/x"),
    ("GET", "/api/v1/jobs/x/results"),
    ("POST", "/api/v1/jobs/x/cancel"),
    ("GET", "/api/v1/models"),
    ("POST", "/api/v1/models"),
    ("DELETE", "/api/v1/models/m/1"),
    ("GET", "/api/v1/followers"),
]
FOLLOWER_ROUTES = [
    ("POST", "/api/v1/followers/register"),
    ("POST", "/api/v1/followers/f/heartbeat"),
    ("POST", "/api/v1/jobs/x/claim"),
    ("POST", "/api/v1/jobs/x/points"),
    ("POST", "/api/v1/jobs/x/finish"),
    ("GET", "/api/v1/models/m/1"),
    ("GET", "/api/v1/models/m/1/file"),
]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-000000000"}, {"Authorization": "Basic abc"}])
def test_missing_or_wrong_token_is_401(leader: Leader, headers: dict[str, str]) -> None:
    for method, path in USER_ROUTES + FOLLOWER_ROUTES:
        response = leader.client.request(method, path, headers=headers, json={})
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"] == "unauthorized"


def test_follower_token_cannot_use_user_routes(leader: Leader) -> None:
    for method, path in USER_ROUTES:
        response = leader.client.request(method, path, headers=FOLLOWER, json={})
        assert response.status_code == 401, (method, path)


def test_admin_may_call_follower_routes(leader: Leader) -> None:
    response = leader.client.post("/api/v1/followers/register", headers=ADMIN, json=follower_info("adm", "incarnation-1"))
    assert response.status_code == 200


def test_health_and_docs_are_open(leader: Leader) -> None:
    assert leader.client.get("/healthz").json() == {"status": "ok"}
    assert leader.client.get("/openapi.json").status_code == 200
    assert leader.client.get("/docs").status_code == 200


def test_health_reports_redis_down(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(redis_url="redis://127.0.0.1:1/0")
    response = leader.client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["field"] == "redis"


def test_bad_bodies_are_422_naming_the_field(leader: Leader) -> None:
    body = follower_info("f1", "incarnation-1")
    body["cpu_count"] = "many"
    response = leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=body)
    assert response.status_code == 422
    assert response.json()["field"] == "body.cpu_count"
    garbled = leader.client.post(
        "/api/v1/jobs/x/claim", headers={**ADMIN, "Content-Type": "application/json"}, content=b"{nope"
    )
    assert garbled.status_code == 422
    assert garbled.json()["field"] == "(body)"
    missing = leader.client.post("/api/v1/jobs/x/claim", headers=ADMIN, json={"follower_id": "f1", "incarnation": "i"})
    assert missing.status_code == 422 and missing.json()["field"] == "body.attempt"
    unknown_route = leader.client.get("/api/v1/nothing-here", headers=ADMIN)
    assert unknown_route.status_code == 404 and unknown_route.json()["error"] == "not_found"
