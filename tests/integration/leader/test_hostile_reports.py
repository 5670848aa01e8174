"""Reports and settings that are not what the wire says are refused with a 422 naming the field, never a 500 (the
fuzzer found `result.search` given as a list of non-objects raising a TypeError: a 500) and never coerced into
something no one meant."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.leader.conftest import ADMIN, FOLLOWER, Leader, follower_info, point_result


@pytest.mark.parametrize("search", [[1, 2], ["x"], [{"rate": 1}], [[]]])
def test_a_point_whose_search_is_not_a_search_is_a_422_naming_it(leader: Leader, search: object) -> None:
    leader.upload_model()
    job_id = leader.submit()["id"]
    follower, incarnation = f"agent-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    leader.register(follower, incarnation, backends=["onnxruntime"])
    job = leader.wait_dispatched(job_id)
    claimed = {"attempt": job["attempt"], "follower_id": follower, "incarnation": incarnation}
    claim = leader.client.post(f"/api/v1/jobs/{job_id}/claim", headers=leader.as_follower(follower), json=claimed)
    assert claim.status_code == 200, claim.text
    point = claim.json()["points"][0]
    body = point_result(point["index"], follower) | {"point": point, "search": search}
    report = {"attempt": job["attempt"], "follower_id": follower, "result": body}
    response = leader.client.post(f"/api/v1/jobs/{job_id}/points", headers=leader.as_follower(follower), json=report)
    assert response.status_code == 422, response.text
    assert "result.search" in response.text, response.text
    assert leader.job(job_id)["points_done"] == 0  # nothing half-written


def test_values_of_the_wrong_type_are_refused_where_the_schema_states_a_type(leader: Leader) -> None:
    """Lax coercion stored what no one meant: `since=0.5` read as seconds after 1970, `false` stored as 0.0 hours of
    quota or microseconds of cost. Each is a 422 naming the field now."""
    since = leader.client.get("/api/v1/jobs", headers=ADMIN, params={"since": "0.5"})
    assert since.status_code == 422 and "since" in since.text and "not a number" in since.text, since.text
    assert leader.client.get("/api/v1/jobs", headers=ADMIN, params={"since": "2026-11-28"}).status_code == 200
    for bad in ({"quota_hours_per_day": {"0": False}}, {"weight": True}, {"quota_hours_per_day": {"gpu": "8"}}):
        team = leader.client.put("/api/v1/teams/red", headers=ADMIN, json=bad)
        assert team.status_code == 422, (bad, team.text)
    assert leader.client.put("/api/v1/teams/red", headers=ADMIN, json={"quota_hours_per_day": {"gpu": 8}}).status_code == 200
    info = follower_info(f"agent-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, ["onnxruntime"])
    lying = {**info, "target_costs_us": {"x": False}}
    registered = leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=lying)
    assert registered.status_code == 422 and "target_costs_us" in registered.text, registered.text
