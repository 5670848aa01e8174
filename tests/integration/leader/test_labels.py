"""Follower labels through the real leader: registered, listed, and honoured by placement with the reason said."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.integration.leader.conftest import ADMIN, FOLLOWER, YAML, Leader, follower_info

SPEC = """name: labelled
model: ident:1
backends: [onnxruntime]
load: {{allow_short: true, rate: 50, duration: 2s}}
requires: {{labels: {labels}}}
"""


def register(leader: Leader, follower_id: str, labels: dict[str, str]) -> None:
    info = {**follower_info(follower_id, f"incarnation-{follower_id}"), "labels": labels}
    response = leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=info)
    assert response.status_code == 200, response.text
    leader.credentials[follower_id] = response.json()["credential"]


def test_a_job_asking_for_labels_runs_only_where_they_are(leader: Leader) -> None:
    leader.upload_model()
    register(leader, "f-plain", {})
    register(leader, "f-zone-a", {"zone": "a", "network": "25g"})
    listed = {f["info"]["follower_id"]: f["info"]["labels"] for f in leader.client.get("/api/v1/followers", headers=ADMIN).json()}
    assert listed == {"f-plain": {}, "f-zone-a": {"zone": "a", "network": "25g"}}
    jobs = [leader.submit(text=SPEC.format(labels="{zone: a}"))["id"] for _ in range(3)]
    # The labelled follower takes two (the one it runs and one beside it), never the idle unlabelled one...
    held = [leader.wait_dispatched(job_id) for job_id in jobs[:2]]
    assert [j["follower_id"] for j in held] == ["f-zone-a", "f-zone-a"]
    # ...and the third waits for it at the leader: its start is after those two, not now on f-plain.
    third = leader.wait_for(jobs[2], lambda j: j["estimated_start"] is not None)
    assert third["state"] == "queued" and third["follower_id"] is None
    start_in = (datetime.fromisoformat(third["estimated_start"]) - datetime.now(UTC)).total_seconds()
    assert start_in == pytest.approx(sum(j["estimate_s"] for j in held), abs=2.0)
    nowhere = leader.submit(text=SPEC.format(labels="{zone: b}"))
    waiting = leader.wait_for(nowhere["id"], lambda j: bool(j.get("waiting_reason")))
    assert "needs a follower labelled zone=b" in waiting["waiting_reason"], waiting["waiting_reason"]
    bad = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=SPEC.format(labels="{zone: 'a b'}"))
    assert bad.status_code == 422 and bad.json()["field"].startswith("requires.labels"), bad.text
