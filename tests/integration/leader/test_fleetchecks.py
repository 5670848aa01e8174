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


def play(leader: Leader, follower: str, job_id: str, p50: float | None) -> None:
    """Play a follower's part in a check job as its agent would: claim the pinned job, report, finish (a p50 of None:
    the attempt fails before its point, as when the server cannot start)."""
    job = leader.wait_dispatched(job_id)
    assert job["follower_id"] == follower and job["spec"]["requires"]["follower"] == follower  # pinned, and placed so
    body = {"attempt": 1, "follower_id": follower, "incarnation": f"inc-{follower}-0000"}
    claim = leader.client.post(f"/api/v1/jobs/{job_id}/claim", headers=leader.as_follower(follower), json=body)
    assert claim.status_code == 200, claim.text
    if p50 is None:
        failed = {"attempt": 1, "follower_id": follower, "state": "failed", "error": "server did not become ready in 60 s"}
        done = leader.client.post(f"/api/v1/jobs/{job_id}/finish", headers=leader.as_follower(follower), json=failed)
        assert done.status_code == 200, done.text
        return
    for point in claim.json()["points"]:
        body = point_result(point["index"], follower)
        body["point"] = point
        body["latency_ms"] = {**body["latency_ms"], "p50": p50, "p99": p50 * 2}
        report = {"attempt": 1, "follower_id": follower, "result": body}
        assert leader.client.post(f"/api/v1/jobs/{job_id}/points", headers=leader.as_follower(follower),
                                  json=report).status_code == 200  # fmt: skip
    done = leader.client.post(f"/api/v1/jobs/{job_id}/finish", headers=leader.as_follower(follower),
                              json={"attempt": 1, "follower_id": follower, "state": "succeeded"})  # fmt: skip
    assert done.status_code == 200, done.text


def run_check(
    leader: Leader, p50s: dict[str, float | None], again: dict[str, float | None] | None = None
) -> dict[str, Any]:
    """Start a check and play every follower's part; then, where the first round found suspects, their re-runs with
    the figures in `again` (which must name exactly the suspects)."""
    made = leader.client.post("/api/v1/fleet-checks", headers=ADMIN, json={"model": "ident:1", "rate": 20, "duration_s": 2})
    assert made.status_code == 201, made.text
    check = made.json()
    assert sorted(check["jobs"]) == FOLLOWERS and check["state"] == "running" and check["recheck"] == {}
    for follower, job_id in check["jobs"].items():
        assert get(leader, f"/api/v1/fleet-checks/{check['id']}")["state"] == "running"  # until its last job ends
        play(leader, follower, job_id, p50s[follower])
    result = get(leader, f"/api/v1/fleet-checks/{check['id']}")
    assert sorted(result["recheck"]) == sorted(again or {}), result
    for follower, job_id in result["recheck"].items():
        assert result["state"] == "running" and job_id not in check["jobs"].values()  # a new job, pinned to the suspect
        play(leader, follower, job_id, (again or {})[follower])
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
    slowed = run_check(leader, {"n1": 2.0, "n2": 2.06, "n3": 3.3, "n4": 1.97}, again={"n3": 3.4})
    assert slowed["outliers"] == ["n3"] and slowed["across"]["metric"] == "p50_ms"  # judged on its re-run's figure
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
    run_check(leader, {"n1": 2.0, "n2": 2.06, "n3": 3.4, "n4": 1.97}, again={"n3": 3.4})
    listed = anomalies(leader)
    assert listed["n3"]["state"] == "draining" and listed["n3"]["anomaly"]["drained"] is True
    few = leader.client.post("/api/v1/fleet-checks", headers=ADMIN, json={"model": "ident:1", "hardware": "no such cpu"})
    assert few.status_code == 400 and few.json()["field"] == "hardware" and "found 0" in few.json()["message"], few.text


def test_a_suspect_whose_re_run_alone_is_ordinary_is_not_marked(make_leader: Callable[..., Leader]) -> None:
    """The first round's outlier (a burst elsewhere on its host slowed its few seconds) is re-run alone; its re-run is
    in line with the class, so nobody is marked or drained, and the check's figures hold the re-run's."""
    leader = start(make_leader, fleetcheck_drain=True)
    noisy = run_check(leader, {"n1": 0.58, "n2": 0.78, "n3": 0.58, "n4": 0.53}, again={"n2": 0.57})
    assert noisy["outliers"] == [] and noisy["across"]["outliers"] == []
    assert {p["follower_id"]: p["value_ms"] for p in noisy["across"]["points"]}["n2"] == 0.57
    listed = anomalies(leader)
    assert not any(v["anomaly"] for v in listed.values()) and all(v["state"] != "draining" for v in listed.values())


def test_a_follower_whose_job_fails_is_re_run_alone_and_marked_when_it_fails_again(
    make_leader: Callable[..., Leader],
) -> None:
    """A follower that gives no figure is not left out of the verdict in silence: it is a suspect, re-run alone; failing
    again, it is marked with the reason (the check no longer reads "outliers: none" over three of four followers)."""
    leader = start(make_leader)
    broken = run_check(leader, {"n1": 2.0, "n2": 2.06, "n3": None, "n4": 1.97}, again={"n3": None})
    assert broken["outliers"] == ["n3"] and sorted(broken["no_figure"]) == ["n3"], broken
    assert "failed: server did not become ready in 60 s" in broken["no_figure"]["n3"]
    assert broken["recheck"]["n3"] in broken["no_figure"]["n3"]  # the reason names the re-run's job
    assert sorted(p["follower_id"] for p in broken["across"]["points"]) == ["n1", "n2", "n4"]
    listed = anomalies(leader)
    assert [f for f, v in listed.items() if v["anomaly"]] == ["n3"]
    assert "no figure in the check, run with the others and again alone" in listed["n3"]["anomaly"]["evidence"]

    recovered = run_check(leader, {"n1": 2.0, "n2": None, "n3": 2.01, "n4": 1.97}, again={"n2": 2.03})
    assert recovered["outliers"] == [] and recovered["no_figure"] == {}, recovered
    assert {p["follower_id"]: p["value_ms"] for p in recovered["across"]["points"]}["n2"] == 2.03
    assert not any(v["anomaly"] for v in anomalies(leader).values())  # n3's mark cleared by a clean check
