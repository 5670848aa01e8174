"""Web sessions live at the leader (the cookie holds a session id, not a token); tokens expire and are revoked."""

from __future__ import annotations

from datetime import timedelta

import pytest

from leader.auth.tokens import SESSION_COOKIE, csrf_token
from tests.integration.leader.conftest import ADMIN, ADMIN_TOKEN, Leader


def _login(leader: Leader, token: str) -> str:
    answer = leader.client.post("/login", data={"token": token, "next": "/leaderboard"}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    session_id = answer.cookies[SESSION_COOKIE]
    assert token not in session_id
    return session_id


def _page_status(leader: Leader, session_id: str) -> int:
    leader.client.cookies.clear()
    answer = leader.client.get("/leaderboard", cookies={SESSION_COOKIE: session_id}, follow_redirects=False)
    return answer.status_code


def test_the_cookie_is_a_server_side_session_that_logout_and_revocation_end(leader: Leader) -> None:
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "vic", "role": "viewer"}).json()
    session_id = _login(leader, made["token"])
    assert _page_status(leader, session_id) == 200
    stored = leader.db.sessions.find_one({})
    assert stored is not None and made["token"] not in str(stored) and session_id not in str(stored)  # hashes only
    # The session id is not an API token: it opens no API door by bearer.
    assert leader.client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {session_id}"}).status_code == 401

    assert leader.client.delete(f"/api/v1/tokens/{made['id']}", headers=ADMIN).status_code == 200
    assert _page_status(leader, session_id) == 303  # the token was revoked: its session ended with it

    admin_session = _login(leader, ADMIN_TOKEN)
    assert _page_status(leader, admin_session) == 200
    leader.client.cookies.clear()
    csrf = {"csrf": csrf_token(admin_session)}  # what its pages carry (tests/integration/leader/test_console.py)
    out = leader.client.post("/logout", cookies={SESSION_COOKIE: admin_session}, data=csrf, follow_redirects=False)
    assert out.status_code == 303
    assert _page_status(leader, admin_session) == 303  # the old cookie is worthless after logout
    assert leader.db.sessions.count_documents({"user": "admin"}) == 0


def test_agent_credentials_cannot_open_a_page_session(leader: Leader) -> None:
    answer = leader.client.post("/login", data={"token": leader.settings.follower_token.get_secret_value()},
                                follow_redirects=False)  # fmt: skip
    assert answer.status_code == 401 and SESSION_COOKIE not in answer.cookies


def test_tokens_expire(leader: Leader, monkeypatch: pytest.MonkeyPatch) -> None:
    made = leader.client.post("/api/v1/tokens", headers=ADMIN,
                              json={"user": "eve", "role": "viewer", "expires_in_s": 3600}).json()  # fmt: skip
    assert made["expires_at"] is not None
    bearer = {"Authorization": f"Bearer {made['token']}"}
    assert leader.client.get("/api/v1/jobs", headers=bearer).status_code == 200
    session_id = _login(leader, made["token"])
    # An hour and a minute later (the leader's wall clock: expiry is a date), the token and its session are refused.
    from leader.clock import utcnow as real_utcnow
    from leader.store import sessions, users

    later = lambda: real_utcnow() + timedelta(minutes=61)  # noqa: E731
    monkeypatch.setattr(users, "utcnow", later)
    monkeypatch.setattr(sessions, "utcnow", later)
    assert leader.client.get("/api/v1/jobs", headers=bearer).status_code == 401
    assert _page_status(leader, session_id) == 303
    listed = {t["id"]: t for t in leader.client.get("/api/v1/tokens", headers=ADMIN).json()}
    assert listed[made["id"]]["expires_at"] == made["expires_at"]
    too_short = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "x", "role": "viewer", "expires_in_s": 5})
    assert too_short.status_code == 422 and "expires_in_s" in too_short.text


def test_tokens_take_the_leaders_lifetime_by_default(make_leader) -> None:  # type: ignore[no-untyped-def]
    leader = make_leader(token_ttl_s=7200)
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "dee", "role": "viewer"}).json()
    from datetime import datetime

    created, expires = (datetime.fromisoformat(made[k]) for k in ("created_at", "expires_at"))
    assert expires - created == timedelta(seconds=7200)
    never = make_leader(token_ttl_s=0)
    assert never.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "d2", "role": "viewer"}).json()["expires_at"] is None


@pytest.mark.parametrize("trusted", [True, False])
def test_behind_a_trusted_tls_proxy_the_cookie_is_secure(make_leader, trusted: bool) -> None:  # type: ignore[no-untyped-def]
    leader = make_leader(trusted_proxies="*" if trusted else "127.0.0.1")  # the test client's address is "testclient"
    answer = leader.client.post("/login", data={"token": ADMIN_TOKEN}, headers={"X-Forwarded-Proto": "https"},
                                follow_redirects=False)  # fmt: skip
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert ("secure" in cookie.lower()) is trusted  # an untrusted client cannot claim https for it
