"""A follower's report that is not what the wire says is refused with a 422 naming the field, never a 500 (the fuzzer
found `result.search` given as a list of non-objects raising a TypeError: a 500)."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.leader.conftest import Leader, point_result


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
