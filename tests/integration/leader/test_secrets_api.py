"""Target secrets through the real leader: write-only, per team, refused when malformed or missing, opened only for
the follower running the job's current attempt; a leader without a key still drives targets that need none."""

from __future__ import annotations

import uuid
from typing import Any

from common.wire.auth import DEFAULT_TEAM
from tests.integration.leader.conftest import ADMIN, YAML, Leader

KEY = "k" * 32
VALUE = "Bearer sk-live-" + uuid.uuid4().hex


def _target_job(leader: Leader, secret: str | None) -> dict[str, Any]:
    """A job aimed at loopback: refused until an admin allows loopback for the team (common/egress.py), then taken."""
    named = f", secret: {secret}" if secret else ""
    body = (f"name: endpoint\nmodel: remote\ninputs: [{{name: x, datatype: FP32, shape: [-1, 4]}}]\n"
            "load: {allow_short: true, rate: 50, duration: 2s}\n"
            f"target: {{url: 'http://127.0.0.1:9', protocol: kserve-http{named}}}\n")
    refused = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=body)
    assert refused.status_code == 422 and refused.json()["field"] == "target.url", refused.text
    assert "127.0.0.1 is a loopback address" in refused.json()["message"], refused.text
    allowed = leader.client.put(f"/api/v1/teams/{DEFAULT_TEAM}", headers=ADMIN, json={"egress_allow": ["127.0.0.1"]})
    assert allowed.status_code == 200 and allowed.json()["egress_allow"] == ["127.0.0.1/32"], allowed.text
    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def _claimed(leader: Leader, job_id: str, follower_id: str, incarnation: str) -> None:
    job = leader.wait_dispatched(job_id)
    assert job["follower_id"] == follower_id
    claim = leader.client.post(f"/api/v1/jobs/{job_id}/claim", headers=leader.as_follower(follower_id),
                               json={"attempt": 1, "follower_id": follower_id, "incarnation": incarnation})  # fmt: skip
    assert claim.status_code == 200, claim.text
    assert "sk-live" not in claim.text  # the Celery payload and the claim carry no secret


def _credentials(leader: Leader, job_id: str, follower_id: str, headers: dict[str, str]) -> Any:
    return leader.client.get(f"/api/v1/jobs/{job_id}/target-credentials", headers=headers,
                             params={"attempt": 1, "follower_id": follower_id})  # fmt: skip


def test_secrets_are_write_only_and_open_only_for_the_running_follower(make_leader: Any) -> None:
    leader: Leader = make_leader(secret_key=KEY)
    stored = leader.client.post("/api/v1/secrets", headers=ADMIN, json={"name": "api", "header": "X-Api-Key", "value": VALUE})
    assert stored.status_code == 201 and VALUE not in stored.text and stored.json()["header"] == "X-Api-Key"
    listed = leader.client.get("/api/v1/secrets", headers=ADMIN)
    assert [s["name"] for s in listed.json()] == ["api"] and VALUE not in listed.text
    assert VALUE.encode() not in leader.db.secrets.find_one({"name": "api"})["sealed"]  # sealed at rest
    bad = leader.client.post("/api/v1/secrets", headers=ADMIN, json={"name": "x", "value": "a\r\nHost: evil"})
    assert bad.status_code == 422 and "evil" not in bad.text
    spec = "name: e\nmodel: m\nload: {rate: 5, allow_short: true}\n"
    spec += "target: {url: 'http://h:1', protocol: kserve-http, secret: nope}\n"
    missing = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=spec)
    assert missing.status_code == 422 and missing.json()["field"] == "target.secret", missing.text

    runner, other = "f-run", "f-other"
    leader.register(runner, "incarnation-run")
    job = _target_job(leader, "api")
    _claimed(leader, job["id"], runner, "incarnation-run")
    leader.register(other, "incarnation-other")
    opened = _credentials(leader, job["id"], runner, leader.as_follower(runner))
    assert opened.status_code == 200, opened.text
    assert opened.json() == {"headers": [["X-Api-Key", VALUE]], "ca_pem": None, "egress_allow": ["127.0.0.1/32"]}
    assert _credentials(leader, job["id"], runner, leader.as_follower(other)).status_code == 403  # not its credential
    assert _credentials(leader, job["id"], other, leader.as_follower(other)).status_code == 409  # not its job
    assert _credentials(leader, job["id"], runner, ADMIN).status_code == 403  # not even an admin
    assert VALUE not in leader.client.get(f"/api/v1/jobs/{job['id']}", headers=ADMIN).text
    assert leader.client.delete("/api/v1/secrets/api", headers=ADMIN).status_code == 200
    assert leader.client.get("/api/v1/secrets", headers=ADMIN).json() == []


def test_a_leader_without_a_key_refuses_secrets_but_drives_targets_without_one(leader: Leader) -> None:
    refused = leader.client.post("/api/v1/secrets", headers=ADMIN, json={"name": "api", "value": VALUE})
    assert refused.status_code == 503 and refused.json()["field"] == "secret_key", refused.text
    leader.register("f-plain", "incarnation-plain")
    job = _target_job(leader, None)
    _claimed(leader, job["id"], "f-plain", "incarnation-plain")
    opened = _credentials(leader, job["id"], "f-plain", leader.as_follower("f-plain"))
    assert opened.status_code == 200 and opened.json() == {"headers": [], "ca_pem": None, "egress_allow": ["127.0.0.1/32"]}
