"""Fleet checks through the real leader (SecantusDB, Redis, placement): one pinned job per follower of a class, the
outlier test when the last one ends, the mark on the follower (and the drain where the settings say so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.integration.leader.conftest import ADMIN, Leader, point_result

FOLLOWERS = ["n1", "n2", "n3", "n4"]


def get(leader: Leader, path: str) -> Any:
    response = leader.client.get(path, headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()


def run_check(leader: Leader, p50s: dict[str, float]) -> dict[str, Any]:
    """Start a check and play each follower's part as its agent would: claim the pinned job, report, finish."""
    made = leader.client.post("/api/v1/fleet-checks", headers=ADMIN, json={"model": "ident:1", "rate": 20, "duration_s": 2})
    assert made.status_code == 201, made.text
    check = made.json()
    assert sorted(check["jobs"]) == FOLLOWERS and check["state"] == "running"
    for follower, job_id in check["jobs"].items():
        job = leader.wait_dispatched(job_id)
        assert job["follower_id"] == follower and job["spec"]["requires"]["follower"] == follower  # pinned, and placed so
        body = {"attempt": 1, "follower_id": follower, "incarnation": f"inc-{follower}-0000"}
        claim = leader.client.post(f"/api/v1/jobs/{job_id}/claim", headers=leader.as_follower(follower), json=body)
        assert claim.status_code == 200, claim.text
        for point in claim.json()["points"]:
            body = point_result(point["index"], follower)
            body["point"] = point
            body["latency_ms"] = {**body["latency_ms"], "p50": p50s[follower], "p99": p50s[follower] * 2}
            report = {"attempt": 1, "follower_id": follower, "result": body}
            assert leader.client.post(f"/api/v1/jobs/{job_id}/points", headers=leader.as_follower(follower),
                                      json=report).status_code == 200  # fmt: skip
        assert get(leader, f"/api/v1/fleet-checks/{check['id']}")["state"] == "running"  # until its last job ends
        done = leader.client.post(f"/api/v1/jobs/{job_id}/finish", headers=leader.as_follower(follower),
                                  json={"attempt": 1, "follower_id": follower, "state": "succeeded"})  # fmt: skip
        assert done.status_code == 200, done.text
    result = get(leader, f"/api/v1/fleet-checks/{check['id']}")
    assert result["state"] == "done"
    return result


def anomalies(leader: Leader) -> dict[str, Any]:
    return {f["info"]["follower_id"]: f for f in get(leader, "/api/v1/followers")}


def start(make_leader: Callable[..., Leader], **settings: Any) -> Leader:
    leader = make_leader(**settings)
    leader.upload_model()
    for follower in FOLLOWERS:
        leader.register(follower, f"inc-{follower}-0000")
    return leader


def test_a_slowed_follower_is_found_marked_with_its_evidence_and_cleared_by_a_clean_check(
    make_leader: Callable[..., Leader],
) -> None:
    leader = start(make_leader)
    slowed = run_check(leader, {"n1": 2.0, "n2": 2.06, "n3": 3.4, "n4": 1.97})
    assert slowed["outliers"] == ["n3"] and slowed["across"]["metric"] == "p50_ms"
    listed = anomalies(leader)
    evidence = listed["n3"]["anomaly"]["evidence"]
    assert listed["n3"]["anomaly"]["check_id"] == slowed["id"] and "p50_ms 3.4 ms vs class median 2.03 ms (+67%" in evidence
    assert [f for f, v in listed.items() if v["anomaly"]] == ["n3"] and listed["n3"]["state"] != "draining"
    clean = run_check(leader, {"n1": 2.0, "n2": 2.06, "n3": 2.01, "n4": 1.97})
    assert clean["outliers"] == [] and not any(v["anomaly"] for v in anomalies(leader).values())  # the mark is cleared


def test_with_the_drain_setting_an_outlier_is_drained_and_too_few_followers_is_refused(
    make_leader: Callable[..., Leader],
) -> None:
    leader = start(make_leader, fleetcheck_drain=True)
    run_check(leader, {"n1": 2.0, "n2": 2.06, "n3": 3.4, "n4": 1.97})
    listed = anomalies(leader)
    assert listed["n3"]["state"] == "draining" and listed["n3"]["anomaly"]["drained"] is True
    few = leader.client.post("/api/v1/fleet-checks", headers=ADMIN, json={"model": "ident:1", "hardware": "no such cpu"})
    assert few.status_code == 400 and few.json()["field"] == "hardware" and "found 0" in few.json()["message"], few.text
