"""Sweeps across the fleet: a split job's parts go to several followers, a lost part is requeued alone, one result."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from benchfleet.cli import running_points, watch_job
from benchfleet.client import BenchfleetClient
from common.spec.grid import expand
from common.spec.job import SplitSpec
from common.spec.parse import parse_spec_yaml
from leader.jobplan import split_points
from tests.integration.leader.conftest import ADMIN, Leader, point_result
from tests.integration.leader.test_metrics_book import gauge
from tests.integration.leader.test_scheduling import claim, post_as


class ViaTestClient(httpx.BaseTransport):
    """The SDK's httpx requests answered by the in-process app through its TestClient (which starlette builds on
    httpx2 when that is installed, as huggingface_hub, a dependency of tokenizers, installs it)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.client.request(request.method, str(request.url), headers=dict(request.headers), content=request.read())
        headers = [(k, v) for k, v in answer.headers.items() if k.lower() not in ("content-encoding", "transfer-encoding")]
        return httpx.Response(answer.status_code, headers=headers, content=answer.content)

SPLIT_YAML = """\
name: sweep
model: ident:1
backends: [onnxruntime]
batch_sizes: [1, 2, 4, 8]
load: {allow_short: true, rate: 50, duration: 2s, warmup: 0s}
split: {max_parts: 2}
"""


def test_split_points_are_contiguous_near_equal_parts() -> None:
    points = expand(parse_spec_yaml(SPLIT_YAML.replace("[1, 2, 4, 8]", "[1, 2, 3, 4, 5]")))
    parts = split_points(points, SplitSpec(max_parts=3))
    assert [[p.index for p in part] for part in parts] == [[0, 1], [2, 3], [4]]
    assert len(split_points(points, SplitSpec(max_parts=4, min_points=3))) == 1  # 5 points cannot make 2 parts of 3
    assert split_points(points, None) == [points]


def _heartbeats(leader: Leader, beating: dict[str, str], stop: threading.Event) -> threading.Thread:
    """Keep the named followers alive (the others fall silent and go missing)."""

    def beat() -> None:
        while not stop.wait(0.2):
            for follower_id, incarnation in list(beating.items()):
                leader.heartbeat(follower_id, incarnation, state="busy")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    return thread


def test_split_job_runs_on_two_followers_requeues_a_lost_part_alone_and_merges_one_result(
    make_leader: Callable[..., Leader],
) -> None:
    leader = make_leader(missing_after_s=1.0)
    leader.upload_model()
    followers = {f"f-{uuid.uuid4().hex[:8]}": uuid.uuid4().hex for _ in range(3)}
    a, b, c = followers
    beating = {a: followers[a], b: followers[b]}
    stop = threading.Event()
    for fid in (a, b):
        leader.register(fid, followers[fid])
    beater = _heartbeats(leader, beating, stop)
    try:
        job = leader.submit(text=SPLIT_YAML)
        assert len(job["parts"]) == 2 and job["points_total"] == 4
        parts = [leader.wait_state(p, "assigned") for p in job["parts"]]
        assert {p["follower_id"] for p in parts} == {a, b}, "the parts went to two followers"
        assert all(p["part_of"] == job["id"] and p["points_total"] == 2 for p in parts)
        assert leader.job(job["id"])["state"] == "queued"  # the split job itself is never placed
        first, second = parts
        for part in parts:
            fid = part["follower_id"]
            assert claim(leader, part["id"], 1, fid, followers[fid]).status_code == 200
        assert leader.job(job["id"])["state"] == "running"

        # The first part finishes: two points (numbered 0, 1 within the part).
        fid = first["follower_id"]
        for i, batch in enumerate((1, 2) if first["id"].endswith("-p0") else (4, 8)):
            report = {"attempt": 1, "follower_id": fid, "result": point_result(i, fid, batch=batch)}
            assert post_as(leader, fid, f"/api/v1/jobs/{first['id']}/points", report).status_code == 200
        finish = {"attempt": 1, "follower_id": fid, "state": "succeeded"}
        assert post_as(leader, fid, f"/api/v1/jobs/{first['id']}/finish", finish).status_code == 200
        assert leader.job(job["id"])["state"] == "running" and leader.job(job["id"])["points_done"] == 2

        # The second part's follower dies mid-part; a third follower comes: only that part is requeued and moves.
        lost = second["follower_id"]
        beating.pop(lost)
        leader.register(c, followers[c])
        beating[c] = followers[c]
        again = leader.wait_for(second["id"], lambda j: j["attempt"] == 2 and j["state"] == "assigned", timeout=15)
        assert again["follower_id"] in {fid, c} and again["follower_id"] != lost
        assert leader.job(first["id"])["attempt"] == 1, "the finished part stayed as it was"
        mover = again["follower_id"]
        assert claim(leader, second["id"], 2, mover, followers[mover]).status_code == 200
        for i, batch in enumerate((4, 8) if second["id"].endswith("-p1") else (1, 2)):
            report = {"attempt": 2, "follower_id": mover, "result": point_result(i, mover, batch=batch)}
            assert post_as(leader, mover, f"/api/v1/jobs/{second['id']}/points", report).status_code == 200
        finish = {"attempt": 2, "follower_id": mover, "state": "succeeded"}
        assert post_as(leader, mover, f"/api/v1/jobs/{second['id']}/finish", finish).status_code == 200
    finally:
        stop.set()
        beater.join()

    done = leader.job(job["id"])
    assert done["state"] == "succeeded" and done["points_done"] == 4
    assert [h["state"] for h in done["history"]].count("succeeded") == 1
    results = leader.client.get(f"/api/v1/jobs/{job['id']}/results", headers=ADMIN).json()
    # One result set: the four points of the grid, numbered back into it, each from the follower that ran its part.
    assert [(p["point"]["index"], p["point"]["batch_size"]) for p in results["points"]] == [(0, 1), (1, 2), (2, 4), (3, 8)]
    ran = [p["environment"]["follower_id"] for p in results["points"]]
    expected = [fid, fid, mover, mover] if first["id"].endswith("-p0") else [mover, mover, fid, fid]
    assert ran == expected and lost not in ran


def test_a_failed_part_fails_the_split_job_and_a_cancel_reaches_every_part(leader: Leader) -> None:
    leader.upload_model()
    follower, incarnation = f"f-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    leader.register(follower, incarnation)
    job = leader.submit(text=SPLIT_YAML)
    first, second = (leader.wait_state(p, "assigned") for p in job["parts"])
    assert claim(leader, first["id"], 1, follower, incarnation).status_code == 200
    failed = {"attempt": 1, "follower_id": follower, "state": "failed", "error": "server died"}
    assert post_as(leader, follower, f"/api/v1/jobs/{first['id']}/finish", failed).status_code == 200
    assert leader.job(job["id"])["state"] == "running", "one part is still to run"
    assert leader.client.post(f"/api/v1/jobs/{second['id']}/cancel", headers=ADMIN).status_code == 200
    settled = leader.job(job["id"])
    assert settled["state"] == "failed" and f"part {first['id']} failed: server died" in settled["error"]

    other = leader.submit(text=SPLIT_YAML)
    cancelled = leader.client.post(f"/api/v1/jobs/{other['id']}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert [leader.job(p)["state"] for p in other["parts"]] == ["cancelled", "cancelled"]


def test_queue_cap_counts_the_parts_a_split_job_creates(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(max_waiting_per_user=5)
    leader.upload_model()
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "sam", "role": "submitter"})
    sam = {"Authorization": f"Bearer {made.json()['token']}", "Content-Type": "application/yaml"}
    four = SPLIT_YAML.replace("max_parts: 2", "max_parts: 4")  # 4 points → 4 part jobs
    assert leader.client.post("/api/v1/jobs", headers=sam, content=four).status_code == 201
    # 4 waiting + 2 more parts would pass the cap of 5, though "one job" would not.
    over = leader.client.post("/api/v1/jobs", headers=sam, content=SPLIT_YAML)
    assert over.status_code == 429 and over.json()["field"] == "max_waiting_per_user"
    assert "splits into 2 parts" in over.json()["message"] and "allows 5 per user" in over.json()["message"]
    assert leader.db.jobs.count_documents({"owner": "sam"}) == 5  # the split job and its 4 parts, nothing more
    plain = SPLIT_YAML.replace("split: {max_parts: 2}\n", "")
    assert leader.client.post("/api/v1/jobs", headers=sam, content=plain).status_code == 201  # 4 + 1 = the cap
    # Concurrent split submissions of another user: admission is serialised, the cap is never passed.
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "cat", "role": "submitter"})
    cat = {"Authorization": f"Bearer {made.json()['token']}", "Content-Type": "application/yaml"}
    codes: list[int] = []

    def submit() -> None:
        codes.append(leader.client.post("/api/v1/jobs", headers=cat, content=SPLIT_YAML).status_code)

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [201, 201, 429, 429, 429, 429]  # 2 + 2 parts fit under 5; a third split job would make 6
    waiting = leader.db.jobs.count_documents({"owner": "cat", "state": "queued", "parts": {"$exists": False}})
    assert waiting == 4


def _gauges_when(leader: Leader, want: dict[str, float], timeout: float = 15.0) -> str:
    """The /metrics text once the job-state gauges read `want` (the refresh task runs every 2 s)."""
    deadline = time.monotonic() + timeout
    while True:
        text = leader.client.get("/metrics").text
        got = {state: gauge(text, "benchfleet_leader_jobs", "state", state) for state in want}
        if got == want or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def test_split_job_views_show_the_parts_aggregate_and_metrics_count_parts_once(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader()
    leader.upload_model()
    followers = {f"f-{uuid.uuid4().hex[:8]}": uuid.uuid4().hex for _ in range(2)}
    for fid, incarnation in followers.items():
        leader.register(fid, incarnation)
    job = leader.submit(text=SPLIT_YAML)
    parts = {p["id"]: p for p in (leader.wait_dispatched(p) for p in job["parts"])}
    for part in parts.values():
        assert claim(leader, part["id"], 1, part["follower_id"], followers[part["follower_id"]]).status_code == 200
    p0 = parts[f"{job['id']}-p0"]
    report = {"attempt": 1, "follower_id": p0["follower_id"], "result": point_result(0, p0["follower_id"], batch=1)}
    assert post_as(leader, p0["follower_id"], f"/api/v1/jobs/{p0['id']}/points", report).status_code == 200

    # GET /jobs/{id} and the job list: the split job's progress is its parts' (1 of 4 points).
    view = leader.job(job["id"])
    assert view["state"] == "running" and (view["points_done"], view["points_total"]) == (1, 4)
    listed = {j["id"]: j for j in leader.client.get("/api/v1/jobs", headers=ADMIN).json()}
    assert listed[job["id"]]["points_done"] == 1 and listed[p0["id"]]["points_done"] == 1
    assert listed[p0["id"]]["part_start"] == 0 and listed[f"{job['id']}-p1"]["part_start"] == 2

    # The CLI's bars: one running point per running part, numbered in the split job's grid.
    with BenchfleetClient("http://testserver", "unused", transport=ViaTestClient(leader.client)) as client:
        client._http.headers.update(ADMIN)
        split = client.job(job["id"])
        assert running_points(client, split, {0}, [1, 2, 3]) == [(1, p0["id"], 1), (2, f"{job['id']}-p1", 0)]
        # Two parts run; the split job itself is not counted a third time.
        text = _gauges_when(leader, {"running": 2.0, "queued": 0.0})
        assert gauge(text, "benchfleet_leader_jobs", "state", "running") == 2, text

        for k, part in enumerate(parts.values()):
            fid = part["follower_id"]
            for i in range(1 if k == 0 else 0, 2):
                report = {"attempt": 1, "follower_id": fid, "result": point_result(i, fid, batch=(1, 2, 4, 8)[2 * k + i])}
                assert post_as(leader, fid, f"/api/v1/jobs/{part['id']}/points", report).status_code == 200
            finish = {"attempt": 1, "follower_id": fid, "state": "succeeded"}
            assert post_as(leader, fid, f"/api/v1/jobs/{part['id']}/finish", finish).status_code == 200
        final = watch_job(client, split, poll_s=0.05)
        assert final.state == "succeeded" and final.points_done == 4
    text = _gauges_when(leader, {"succeeded": 2.0, "running": 0.0})
    assert gauge(text, "benchfleet_leader_jobs", "state", "succeeded") == 2, text  # the two parts, not the split job
