"""Roles and ownership: viewer reads, submitter manages its own jobs and models, admin all; followers use their own credential."""

from __future__ import annotations

import logging
import uuid

import pytest

from tests.integration.leader.conftest import ADMIN, ADMIN_TOKEN, FOLLOWER, FOLLOWER_TOKEN, SPEC_YAML, YAML, Leader, follower_info
from tests.unit.leader.onnx_models import identity_model


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def issue(leader: Leader, user: str, role: str) -> dict:
    response = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": user, "role": role})
    assert response.status_code == 201, response.text
    return response.json()


def test_roles_and_ownership(leader: Leader, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    alice, bob, viewer = issue(leader, "alice", "submitter"), issue(leader, "bob", "submitter"), issue(leader, "vic", "viewer")
    # Only the hash is stored; listing shows no secret.
    stored = leader.db.tokens.find_one({"_id": alice["id"]})
    assert alice["token"] not in str(stored) and len(stored["hash"]) == 64
    listed = leader.client.get("/api/v1/tokens", headers=ADMIN).json()
    assert {t["user"] for t in listed} >= {"alice", "bob", "vic"} and all("token" not in t and "hash" not in t for t in listed)

    files = {"file": ("m.onnx", identity_model(), "application/octet-stream")}
    up = leader.client.post("/api/v1/models", headers=bearer(alice["token"]), data={"name": "am", "version": "1"}, files=files)
    assert up.status_code == 201 and up.json()["owner"] == "alice"
    spec = SPEC_YAML.format(model="am:1")
    job = leader.client.post("/api/v1/jobs", headers={**bearer(alice["token"]), **YAML}, content=spec)
    assert job.status_code == 201 and job.json()["owner"] == "alice"
    job_id = job.json()["id"]

    # viewer reads, never writes
    assert leader.client.get(f"/api/v1/jobs/{job_id}", headers=bearer(viewer["token"])).status_code == 200
    denied = leader.client.post("/api/v1/jobs", headers={**bearer(viewer["token"]), **YAML}, content=spec)
    assert denied.status_code == 403 and denied.json()["field"] == "Authorization"
    assert leader.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=bearer(viewer["token"])).status_code == 403
    # bob may not touch alice's job or model; users may not manage tokens
    assert leader.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=bearer(bob["token"])).json()["field"] == "owner"
    assert leader.client.delete("/api/v1/models/am/1", headers=bearer(bob["token"])).status_code == 403
    assert leader.client.get("/api/v1/tokens", headers=bearer(alice["token"])).status_code == 403
    # alice may cancel her own; an admin may delete anyone's model
    assert leader.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=bearer(alice["token"])).json()["state"] == "cancelled"
    assert leader.client.delete("/api/v1/models/am/1", headers=ADMIN).status_code == 204

    # revocation takes effect at once
    assert leader.client.delete(f"/api/v1/tokens/{bob['id']}", headers=ADMIN).json()["revoked"] is True
    assert leader.client.get("/api/v1/jobs", headers=bearer(bob["token"])).status_code == 401

    for secret in (alice["token"], bob["token"], viewer["token"], ADMIN_TOKEN, FOLLOWER_TOKEN):
        assert secret not in caplog.text


def test_follower_joins_then_uses_its_own_credential(leader: Leader) -> None:
    fid, other, incarnation = f"f-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    reply = leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=follower_info(fid, incarnation))
    credential = reply.json()["credential"]
    assert credential and credential != FOLLOWER_TOKEN
    beat = {"incarnation": "x" * 8, "state": "ready"}
    # the join token only registers
    assert leader.client.post(f"/api/v1/followers/{fid}/heartbeat", headers=FOLLOWER, json=beat).status_code == 403
    assert leader.client.get("/api/v1/models/m/1", headers=FOLLOWER).status_code == 403
    assert leader.client.post(f"/api/v1/followers/{fid}/heartbeat", headers=bearer(credential), json=beat).status_code == 200
    # a credential acts only for its own follower, and never as a user
    assert leader.client.post(f"/api/v1/followers/{other}/heartbeat", headers=bearer(credential), json=beat).status_code == 403
    assert leader.client.get("/api/v1/jobs", headers=bearer(credential)).status_code == 401
    # the join token cannot take the live id over, under any incarnation (they are listed): its credential stands
    for claimed in (uuid.uuid4().hex, incarnation):
        taken = leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=follower_info(fid, claimed))
        assert taken.status_code == 409 and "Retry-After" in taken.headers
    assert leader.client.post(f"/api/v1/followers/{fid}/heartbeat", headers=bearer(credential), json=beat).status_code == 200
    # an admin registering the id (taking it over) revokes the old credential
    leader.client.post("/api/v1/followers/register", headers=ADMIN, json=follower_info(fid, uuid.uuid4().hex))
    assert leader.client.post(f"/api/v1/followers/{fid}/heartbeat", headers=bearer(credential), json=beat).status_code == 401
    # the credential is never listed
    assert credential not in leader.client.get("/api/v1/followers", headers=ADMIN).text


@pytest.mark.parametrize(
    ("load", "field"),
    [
        ("rate: 90000", "load.rate"),
        ("rate: 50\n  duration: 3000s", "load.duration"),
        ("rate: 50\n  max_concurrency: 4000", "load.max_concurrency"),
        ("rate: [" + ", ".join(str(r) for r in range(1, 140)) + "]", "batch_sizes"),
    ],
)
def test_configured_limits_are_422_naming_the_field(leader: Leader, load: str, field: str) -> None:
    leader.upload_model()
    text = f"name: big\nmodel: ident:1\nbatch_sizes: [1, 2]\nload:\n  {load}\n"
    response = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=text)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
