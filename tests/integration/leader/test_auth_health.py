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
    from leader.web.apidocs import ASSETS, VENDOR

    vendored = all((VENDOR / name).is_file() for name in ASSETS)
    docs = leader.client.get("/docs")
    assert docs.status_code == (200 if vendored else 503) and (vendored or "scripts/vendor_web.sh" in docs.text)


def test_health_reports_redis_down(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(redis_url="redis://127.0.0.1:1/0")
    response = leader.client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["field"] == "redis"
    # Unready, yet alive: a liveness probe on /livez does not restart a leader for its broker's outage.
    assert leader.client.get("/livez").json() == {"status": "ok"}


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


def test_text_the_database_cannot_store_is_422_not_500(leader: Leader) -> None:
    """A NUL byte in a key, a lone surrogate (a JSON \\u escape) in a value: found by the OpenAPI fuzzer as 500s."""
    beat = "/api/v1/followers/f1/heartbeat"
    nul = {"incarnation": "i", "state": "ready", "target_costs_us": {"a\x00b": 1.0}}
    nul_key = leader.client.post(beat, headers=ADMIN, json=nul)
    assert nul_key.status_code == 422 and "NUL" in nul_key.json()["message"], nul_key.text
    surrogate = leader.client.post(
        beat, headers={**ADMIN, "Content-Type": "application/json"}, content=b'{"incarnation": "\\ud800", "state": "ready"}'
    )
    assert surrogate.status_code == 422 and "surrogate" in surrogate.json()["message"], surrogate.text
    assert leader.client.post(beat, headers=ADMIN, json={"incarnation": "i", "state": "ready"}).status_code == 200


def test_a_database_outage_is_a_fast_503_with_retry_after_and_ends_when_it_does(
    make_leader: Callable[..., Leader], mongo_service: object
) -> None:
    import time
    from urllib.parse import urlsplit

    from tests.faults.proxy import CuttableProxy

    target = urlsplit(str(mongo_service.url)).port  # type: ignore[attr-defined]
    assert target is not None
    proxy = CuttableProxy(target).start()
    try:
        leader = make_leader(mongo_uri=f"mongodb://127.0.0.1:{proxy.port}/?directConnection=true")
        leader.register("f1", incarnation="incarnation-1")
        assert leader.client.get("/api/v1/jobs", headers=ADMIN).status_code == 200
        proxy.cut()
        # Once the leader knows (its probe, or the first request that ran into the outage), every request is answered
        # at once: not after pymongo's 5 s server selection, and not as a 500.
        deadline, took = time.monotonic() + 20, 99.0
        while time.monotonic() < deadline:
            started = time.monotonic()
            response = leader.client.get("/api/v1/jobs", headers=ADMIN)
            took = time.monotonic() - started
            assert response.status_code == 503, response.text
            if took < 1.0:
                break
        assert took < 1.0 and response.headers["Retry-After"] == "5" and response.json()["field"] == "mongo"
        beat = leader.client.post("/api/v1/followers/f1/heartbeat", headers=leader.as_follower("f1"),
                                  json={"incarnation": "incarnation-1", "state": "ready"})  # fmt: skip
        assert beat.status_code == 503 and beat.headers["Retry-After"] == "5"  # a follower keeps its work and retries
        assert leader.client.get("/healthz").status_code == 503  # health still reports on the database itself
        assert leader.client.get("/livez").status_code == 200  # and the process is alive: nothing restarts it
        proxy.restore()
        # A pooled connection the cut left stalled fails after the leader's socket timeout (15 s) and is replaced.
        deadline = time.monotonic() + 45
        while leader.client.get("/api/v1/jobs", headers=ADMIN).status_code != 200:
            assert time.monotonic() < deadline, "the leader did not come back after the database did"
            time.sleep(0.2)
        assert leader.heartbeat("f1", "incarnation-1") is True
    finally:
        proxy.stop()


def test_docs_load_swagger_ui_from_the_package_not_a_cdn(leader: Leader) -> None:
    """/docs names only the leader's own assets, and they are served (an air-gapped cluster gets a working page)."""
    import re

    from leader.web.apidocs import ASSETS, VENDOR

    if not all((VENDOR / name).is_file() for name in ASSETS):
        pytest.skip("Swagger UI is not vendored here (scripts/vendor_web.sh needs npm)")
    page = leader.client.get("/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", page.text)
    assert urls and not [u for u in urls if u.startswith(("http:", "https:", "//"))], urls
    assert '"validatorUrl": null' in page.text  # Swagger UI's validator badge would come from its own site
    for name in ASSETS:
        asset = leader.client.get(f"/static/vendor/swagger-ui/{name}")
        assert asset.status_code == 200 and len(asset.content) > 100_000
    assert leader.client.get("/redoc").status_code == 404  # FastAPI's CDN page is off
