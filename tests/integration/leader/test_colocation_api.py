"""Submitting a co-location job to the real leader: its other models are resolved and handed to the follower, and a
model that is missing, a language model or served twice is refused naming it."""

from __future__ import annotations

from tests.integration.leader.conftest import ADMIN, YAML, Leader

SPEC = """name: co
model: ident:1
backends: [onnxruntime]
load: {{allow_short: true, rate: 50, duration: 2s}}
colocate: {{models: [{models}]}}
"""


def test_a_co_location_job_carries_its_other_models_to_the_follower(leader: Leader) -> None:
    leader.upload_model()
    leader.upload_model(name="other", version="3")
    missing = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=SPEC.format(models="nope:1"))
    assert missing.status_code == 404 and missing.json()["field"] == "colocate.models.0", missing.text
    twice = leader.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=SPEC.format(models="ident:1"))
    assert twice.status_code == 422 and twice.json()["field"] == "colocate.models.0", twice.text
    job = leader.submit(text=SPEC.format(models="other"))  # the latest version, resolved at submission
    assert job["points_total"] == 4
    leader.register("f-co", "incarnation-co-0001")
    leader.wait_dispatched(job["id"])
    claim = leader.client.post(f"/api/v1/jobs/{job['id']}/claim", headers=leader.as_follower("f-co"),
                               json={"attempt": 1, "follower_id": "f-co", "incarnation": "incarnation-co-0001"})  # fmt: skip
    assert claim.status_code == 200, claim.text
    task = claim.json()
    assert [(m["name"], m["version"]) for m in task["colocated"]] == [("other", "3")]
    assert [(p["served"], p["beside"], p["group"]) for p in task["points"]] == [(0, [], 0), (1, [], 1), (0, [1], 2), (1, [0], 2)]
