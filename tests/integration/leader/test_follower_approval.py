"""Followers earn trust: one joining with the join token is pending (no job, no model, no data, no secret) until an
admin approves it, and a new join under an approved id inherits nothing. The leader's default; the attack run's
finding was that the join token alone read every team's models and secrets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from leader.settings import LeaderSettings
from tests.integration.leader.conftest import ADMIN, FOLLOWER, Leader, follower_info, queued_messages


def _view(leader: Leader, follower_id: str) -> dict:  # type: ignore[type-arg]
    listed = leader.client.get("/api/v1/followers", headers=ADMIN).json()
    return next(f for f in listed if f["info"]["follower_id"] == follower_id)


def test_a_joining_follower_gets_nothing_until_an_admin_approves_it(make_leader: Callable[..., Leader], redis_client) -> None:  # type: ignore[no-untyped-def]
    default = LeaderSettings.model_fields["follower_approval"].default
    assert default == "admin"  # what a leader does unless told to trust its join token
    leader = make_leader(follower_approval=default, missing_after_s=1.0)
    model = leader.upload_model()
    job = leader.submit()
    follower, incarnation = "gpu-7", uuid.uuid4().hex
    joined = leader.register(follower, incarnation)
    assert joined["state"] == "pending" and _view(leader, follower)["state"] == "pending"
    as_it = leader.as_follower(follower)

    # No job: the job waits, saying why, and nothing reaches the follower's queue.
    queued = leader.wait_for(job["id"], lambda j: bool(j.get("waiting_reason")))
    assert queued["state"] == "queued" and "awaiting an admin's approval" in queued["waiting_reason"], queued
    assert queued_messages(redis_client, follower) == []
    # No model of any team, no secret of any job.
    for path in (f"/api/v1/models/{model['name']}/{model['version']}", f"/api/v1/models/{model['name']}/{model['version']}/file"):
        refused = leader.client.get(path, headers=as_it)
        assert refused.status_code == 403 and refused.json()["field"] == "Authorization", refused.text
        assert f"follower {follower} awaits an admin's approval" in refused.json()["message"]
    secrets_path = f"/api/v1/jobs/{job['id']}/target-credentials"
    secret = leader.client.get(secrets_path, headers=as_it, params={"attempt": 1, "follower_id": follower})
    assert secret.status_code == 409, secret.text  # not running there: nothing opened

    # Only an admin approves; then it is ready, gets the job and reads its model.
    viewer = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "val", "role": "viewer"}).json()["token"]
    denied = leader.client.post(f"/api/v1/followers/{follower}/approve", headers={"Authorization": f"Bearer {viewer}"})
    assert denied.status_code == 403, denied.text
    approved = leader.client.post(f"/api/v1/followers/{follower}/approve", headers=ADMIN)
    assert approved.status_code == 200 and approved.json()["state"] == "ready", approved.text
    placed = leader.wait_state(job["id"], "assigned")
    assert placed["follower_id"] == follower
    assert leader.client.get(f"/api/v1/models/{model['name']}/{model['version']}", headers=as_it).status_code == 200

    # Restarted with its own credential: still approved.
    leader.register(follower, uuid.uuid4().hex, as_self=True)
    assert _view(leader, follower)["state"] == "ready"
    # Gone silent, its id joined again with the join token (anyone holding it): pending, approval not inherited.
    deadline = time.monotonic() + 15
    rejoin = follower_info(follower, uuid.uuid4().hex)
    while (again := leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=rejoin)).status_code == 409:
        assert time.monotonic() < deadline, again.text
        time.sleep(0.2)
    assert again.status_code == 200 and again.json()["state"] == "pending", again.text
    # An admin registering a follower approves it by doing so.
    by_admin = leader.client.post("/api/v1/followers/register", headers=ADMIN, json=follower_info("gpu-8", uuid.uuid4().hex))
    assert by_admin.status_code == 200 and by_admin.json()["state"] == "ready", by_admin.text
