"""Fleet scheduling through the leader app: hardware constraints with a stated reason, drain and remove, cancel lists."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime

import pytest

from tests.integration.leader.conftest import ADMIN, ADMIN_TOKEN, Leader
from tests.integration.leader.test_scheduling import claim, post_as

GPU_SPEC = """\
name: needs-gpu
model: ident:1
backends: [onnxruntime]
load: {allow_short: true, rate: 50, duration: 2s, warmup: 0s}
requires: {gpu: true, min_gpu_memory_mb: 16000}
"""


def fid() -> str:
    return f"f-{uuid.uuid4().hex[:10]}"


def test_gpu_job_is_never_placed_on_a_cpu_only_follower_and_says_why(leader: Leader) -> None:
    leader.upload_model()
    cpu_only = fid()
    leader.register(cpu_only)  # registers with gpus: [] (CPU-only, never faked)
    job = leader.submit(text=GPU_SPEC)
    cpu_job = leader.submit()
    leader.wait_dispatched(cpu_job["id"])
    waiting = leader.wait_for(job["id"], lambda j: j["waiting_reason"] is not None)
    assert waiting["state"] == "queued" and waiting["follower_id"] is None
    assert waiting["waiting_reason"] == "waiting: needs a GPU; no available follower has it"
    time.sleep(5 * leader.settings.place_interval_s)  # more placement ticks change nothing
    assert leader.job(job["id"])["state"] == "queued"
    assert all(h["state"] == "queued" for h in leader.job(job["id"])["history"])
    bad = leader.client.post(
        "/api/v1/jobs", headers={**ADMIN, "Content-Type": "application/yaml"}, content=GPU_SPEC.replace("16000", "-1")
    )
    assert bad.status_code == 422 and bad.json()["field"].startswith("requires.min_gpu_memory_mb")


def test_drain_requeues_held_jobs_and_takes_no_new_ones(leader: Leader) -> None:
    leader.upload_model()
    first = fid()
    leader.register(first)
    job = leader.submit()
    leader.wait_dispatched(job["id"])
    drained = leader.client.post(f"/api/v1/followers/{first}/drain", headers=ADMIN)
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    again = leader.wait_for(job["id"], lambda j: j["attempt"] == 2)
    assert any(f"follower {first} drained" in (h["reason"] or "") for h in again["history"])
    assert leader.job(job["id"])["state"] == "queued"  # the only follower is draining
    second = fid()
    leader.register(second)
    assert leader.wait_dispatched(job["id"], attempt=2)["follower_id"] == second
    assert leader.client.post("/api/v1/followers/nobody/drain", headers=ADMIN).status_code == 404
    assert leader.client.delete(f"/api/v1/followers/{second}", headers=ADMIN).status_code == 204
    requeued = leader.wait_for(job["id"], lambda j: j["attempt"] == 3)
    assert f"follower {second} removed by an admin" in requeued["history"][-1]["reason"]
    assert leader.client.delete(f"/api/v1/followers/{second}", headers=ADMIN).status_code == 404


def _spec(name: str, seconds: float) -> str:
    load = f"load: {{rate: 50, duration: {seconds}s, warmup: 0s, allow_short: true}}\n"
    return f"name: {name}\nmodel: ident:1\nbackends: [onnxruntime]\n{load}"


def test_queue_position_and_estimated_start_at_the_leader_follow_its_order(leader: Leader) -> None:
    """By default (placement_lookahead 1) a follower holds one job beside the one it runs; the rest wait at the leader
    in its order (common/fairshare.py: shortest first here, one team), which their positions and starts follow."""
    leader.upload_model()
    # Nobody to run them: places in the leader's queue, shortest first, and no start to estimate.
    long_, short, mid = (leader.submit(text=_spec(n, s))["id"] for n, s in (("long", 30.0), ("short", 10.0), ("mid", 20.0)))
    for job_id in (long_, short, mid):  # each in the book and placement's verdict stored; then all read at once
        leader.wait_for(job_id, lambda v: v["waiting_reason"] is not None and v["queue_position"] is not None)
    views = {j: leader.job(j) for j in (long_, short, mid)}
    assert [views[j]["queue_position"] for j in (short, mid, long_)] == [1, 2, 3]
    assert all(v["estimated_start"] is None and v["waiting_reason"] for v in views.values())
    leader.register(fid())
    # The follower takes the two shortest (the one it runs and the one beside it); the longest waits here, first in the
    # leader's queue (once the queue's table is made again: it is at most a second old), to start when the follower's
    # two are done.
    dispatched = [leader.wait_dispatched(j) for j in (short, mid)]
    waiting = leader.wait_for(long_, lambda v: v["queue_position"] == 1)
    assert waiting["state"] == "queued" and waiting["follower_id"] is None
    start_in = (datetime.fromisoformat(waiting["estimated_start"]) - datetime.now(UTC)).total_seconds()
    assert start_in == pytest.approx(sum(d["estimate_s"] for d in dispatched), abs=2.0)


def test_queue_position_and_estimated_start_on_a_follower(make_leader) -> None:  # type: ignore[no-untyped-def]
    """Without a lookahead every job goes to a follower at once: its place is in that follower's run order."""
    leader = make_leader(placement_lookahead=None)
    leader.upload_model()
    # Nobody to run them: positions in the leader's queue (first come first served), and no start to estimate.
    queued = [leader.submit(text=_spec(f"q{i}", 1.0))["id"] for i in range(3)]
    views = [leader.wait_for(j, lambda v: v["waiting_reason"] is not None and v["queue_position"] is not None) for j in queued]
    assert [v["queue_position"] for v in views] == [1, 2, 3]
    assert all(v["estimated_start"] is None for v in views), views
    for job_id in queued:
        leader.client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN)

    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    long_, short, mid = (leader.submit(text=_spec(n, s))["id"] for n, s in (("long", 30.0), ("short", 10.0), ("mid", 20.0)))
    for job_id in (long_, short, mid):
        leader.wait_dispatched(job_id)
    # Not yet in a heartbeat: ordered shortest first, as the follower's SJF will run them.
    got = {j: leader.job(j) for j in (long_, short, mid)}
    assert [got[j]["queue_position"] for j in (short, mid, long_)] == [1, 2, 3]
    starts = [datetime.fromisoformat(got[j]["estimated_start"]) for j in (short, mid, long_)]
    assert starts[0] <= starts[1] <= starts[2]
    ahead = (starts[2] - starts[0]).total_seconds()
    assert ahead == pytest.approx(got[short]["estimate_s"] + got[mid]["estimate_s"], abs=2.0)
    # The heartbeat's run order (here as FCFS would hold them) is what the follower will do: it wins.
    held = [{"job_id": j, "attempt": 1, "estimate_s": got[j]["estimate_s"]} for j in (long_, short, mid)]
    beat = {"incarnation": incarnation, "state": "ready", "held": held}
    assert (
        leader.client.post(f"/api/v1/followers/{follower}/heartbeat", headers=leader.as_follower(follower), json=beat).status_code
        == 200
    )
    assert [leader.job(j)["queue_position"] for j in (long_, short, mid)] == [1, 2, 3]
    # Running: no position; the others wait for what is left of its estimate.
    claimed = leader.client.post(
        f"/api/v1/jobs/{long_}/claim",
        headers=leader.as_follower(follower),
        json={"attempt": 1, "follower_id": follower, "incarnation": incarnation},
    )
    assert claimed.status_code == 200, claimed.text
    beat["held"] = [{**held[0], "running": True}, *held[1:]]
    leader.client.post(f"/api/v1/followers/{follower}/heartbeat", headers=leader.as_follower(follower), json=beat)
    assert leader.job(long_)["queue_position"] is None
    after = leader.job(short)
    assert after["queue_position"] == 1
    waits = (datetime.fromisoformat(after["estimated_start"]) - datetime.now(UTC)).total_seconds()
    assert 0 < waits <= got[long_]["estimate_s"] + 1


def test_per_user_queue_limit_is_429_naming_the_setting(make_leader) -> None:  # type: ignore[no-untyped-def]
    leader = make_leader(max_waiting_per_user=2)
    leader.upload_model()
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "uma", "role": "submitter"})
    uma = {"Authorization": f"Bearer {made.json()['token']}", "Content-Type": "application/yaml"}
    ids = [leader.client.post("/api/v1/jobs", headers=uma, content=_spec(f"u{i}", 1.0)).json()["id"] for i in range(2)]
    over = leader.client.post("/api/v1/jobs", headers=uma, content=_spec("u2", 1.0))
    assert over.status_code == 429
    assert over.json()["field"] == "max_waiting_per_user" and "allows 2 per user" in over.json()["message"]
    assert over.headers["Retry-After"] == "30"  # nothing runs yet: jobs are being placed, try again in 30 s
    assert leader.db.jobs.count_documents({"owner": "uma"}) == 2  # nothing stored
    leader.submit(text=_spec("admin-exempt", 1.0))  # admins are exempt by default
    assert leader.client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=uma).status_code == 200
    assert leader.client.post("/api/v1/jobs", headers=uma, content=_spec("u3", 1.0)).status_code == 201


def test_estimator_history_corrects_by_fixed_cost_plus_load_seconds(leader: Leader) -> None:
    leader.upload_model()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    short = leader.submit(text=_spec("short", 2.0))["id"]
    assert leader.wait_dispatched(short)["estimate_s"] == 7.0  # no history: the spec's 2 s + 5 s start cost
    assert claim(leader, short, 1, follower, incarnation).status_code == 200
    finish = {"attempt": 1, "follower_id": follower, "state": "succeeded"}
    done = post_as(leader, follower, f"/api/v1/jobs/{short}/finish", finish).json()
    stored = leader.db.durations.find_one({"_id": f"ident:1|onnxruntime|{follower}"})
    assert stored is not None and stored["last_measured_s"] == 2.0 and stored["last_actual_s"] == done["actual_s"]
    # The same run teaches the follower's class (a CPU-only follower without a class label: cpu) and the fleet.
    for level in ("class:cpu", "*"):
        taught = leader.db.durations.find_one({"_id": f"ident:1|onnxruntime|{level}"})
        assert taught is not None and taught["last_actual_s"] == done["actual_s"], level
    # One job size seen: its fixed cost (actual - 2 s load, at least 0) is learned, at a rate of 1 per load second.
    # The old single multiplier (actual / 7 s) would have scaled the 30 s job's 35 s by the same tiny ratio.
    overhead = max(0.0, done["actual_s"] - 2.0)
    long_ = leader.submit(text=_spec("long", 30.0))["id"]
    placed = leader.wait_dispatched(long_)
    assert placed["estimate_s"] == pytest.approx(overhead + 30.0, abs=0.002)
    assert placed["estimate_spread_s"] is None  # one finished job says nothing of how much they vary
    # A second finished job of the kind: the next estimate carries the spread around the fit, shown on the job page.
    assert claim(leader, long_, 1, follower, incarnation).status_code == 200
    post_as(leader, follower, f"/api/v1/jobs/{long_}/finish", finish)
    third = leader.submit(text=_spec("third", 2.0))["id"]
    spread = leader.wait_dispatched(third)["estimate_spread_s"]
    assert spread is not None and spread >= 0
    logged_in = leader.client.post("/login", data={"token": ADMIN_TOKEN, "next": "/jobs"}, follow_redirects=False)
    assert logged_in.status_code == 303
    page = leader.client.get(f"/jobs/{third}")
    assert page.status_code == 200 and "(from the jobs of its kind that finished)" in page.text


def test_a_leader_that_stalled_does_not_judge_followers_it_could_not_hear(make_leader) -> None:  # type: ignore[no-untyped-def]
    leader = make_leader(missing_after_s=1.0)
    leader.upload_model()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    job = leader.submit()
    leader.wait_dispatched(job["id"])
    stop = threading.Event()

    def beat() -> None:  # a healthy follower: beats every 0.2 s throughout (its requests wait while the leader stalls)
        while not stop.wait(0.2):
            leader.heartbeat(follower, incarnation)

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        time.sleep(1.5)  # past the startup grace (one timeout), with beats landing
        # The leader's event loop blocks for 2.5 s (a GC pause, a submit storm's CPU): no heartbeat can be handled.
        leader.client.portal.call(time.sleep, 2.5)
        time.sleep(1.5)  # the monitor's ticks after the stall, then beats again
    finally:
        stop.set()
        beater.join()
    stored = leader.db.followers.find_one({"_id": follower}, {"state": 1})
    assert stored is not None and stored["state"] == "ready", "a follower the leader could not hear was judged missing"
    assert leader.job(job["id"])["attempt"] == 1, "its job was requeued"
    # A follower that really falls silent is still found missing, one timeout after the stall is over.
    again = leader.wait_for(job["id"], lambda j: j["attempt"] == 2, timeout=15)
    assert "missed heartbeats" in again["history"][-1]["reason"]
