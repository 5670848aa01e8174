"""The fleet as processes: a SIGKILLed follower's job finishes on another; a restarted leader runs its queue in SJF order;
a cancel reaches a running point.

One fleet (leader + followers) serves the whole module; jobs are short (one point, no warm-up) because what is proven
here is where and in which order jobs run, not what they measure.
"""

from __future__ import annotations

import os
import random
import signal
import time

import httpx
import pytest

from benchfleet.generate.modelgen import mlp_onnx
from common.wire.jobs import TERMINAL_STATES, JobState
from tests.e2e.test_walking_skeleton import _servers_under, _wait_until
from tests.faults.outcomes import record

pytestmark = pytest.mark.e2e


def _job_yaml(name: str, seconds: float) -> str:
    return f"""
name: {name}
model: mlp-fleet:1
backends: [onnxruntime]
batch_sizes: [1]
load: {{pattern: constant, rate: 40, duration: {seconds}s, warmup: 0s, allow_short: true}}
"""


def _admin(fleet, method: str, path: str) -> httpx.Response:  # type: ignore[no-untyped-def]
    return httpx.request(method, f"{fleet.url}/api/v1{path}", headers={"Authorization": f"Bearer {fleet.admin_token}"})


@pytest.fixture(scope="module")
def model(fleet) -> str:  # type: ignore[no-untyped-def]
    fleet.env["BENCHFLEET_FOLLOWER_AGEING_PER_S"] = "0"  # exact SJF for the order assertion (ageing is unit-tested)
    fleet.env["BENCHFLEET_FOLLOWER_METRICS_PORT"] = "-1"
    with fleet.client() as client:
        return client.upload_model(mlp_onnx(), name="mlp-fleet", version="1").ref


def test_sigkilled_follower_job_completes_on_another_follower_once(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    victim = fleet.start_follower("k-victim")
    fleet.start_follower("k-other")
    assert _admin(fleet, "POST", "/followers/k-other/drain").status_code == 200
    with fleet.client() as client:
        job = client.submit_yaml(_job_yaml("kill-me", 3.0))
        running = _wait_until(lambda: (j := client.job(job.id)).state == JobState.running and j, 60, "the job to run")
        assert running.follower_id == "k-victim"
        assert _admin(fleet, "POST", "/followers/k-other/resume").status_code == 200
        os.killpg(victim.pid, signal.SIGKILL)
        victim.stop()
        done = _wait_until(lambda: (j := client.job(job.id)).state in TERMINAL_STATES and j, 120, "the job to finish")
        results = client.results(job.id)
    assert done.state == JobState.succeeded, done.error
    assert (done.attempt, done.follower_id) == (2, "k-other")
    assert any("k-victim missed heartbeats" in (h.reason or "") for h in done.history)
    assert [p.point.index for p in results.points] == [0], "exactly one final result"
    assert results.points[0].environment.follower_id == "k-other"
    assert done.actual_s is not None and done.actual_s > 0  # the actual run time is stored beside the estimate
    record("fault", "follower agent SIGKILLed (whole process group) mid-point",
           "job requeued with the reason 'missed heartbeats', succeeded on another follower (attempt 2) with one result")


def test_a_follower_stopped_mid_job_gives_it_back_at_once_and_exits_within_5_s(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM (compose's stop, a pod's deletion): the agent tells the leader it is leaving, which requeues its job at
    once (no heartbeat is missed first) and places nothing more on it; the running point and its server stop; the
    agent is gone within 5 s; the job then runs on another follower, one result per point."""
    victim = fleet.start_follower("t-victim")
    fleet.start_follower("t-other")
    with fleet.client() as client:
        for follower in client.followers():  # only t-victim takes it (followers of other tests stay drained)
            if follower.info.follower_id != "t-victim":
                assert _admin(fleet, "POST", f"/followers/{follower.info.follower_id}/drain").status_code == 200
        job = client.submit_yaml(_job_yaml("stop-me", 20.0))
        marker = str(fleet.workdir / "t-victim")
        _wait_until(lambda: client.job(job.id).state == JobState.running and _servers_under(marker), 60, "the point")
        assert _admin(fleet, "POST", "/followers/t-other/resume").status_code == 200
        asked = time.monotonic()
        os.kill(victim.pid, signal.SIGTERM)  # the agent itself, as compose and the kubelet signal it
        _wait_until(lambda: not victim.alive(), 30, "the agent to exit")
        took = time.monotonic() - asked
        print(f"SIGTERM at {time.time() - took:.3f}, exit seen {took:.2f} s later")
        assert not _servers_under(marker), "the point's model server outlived its agent"
        given_back = client.job(job.id)
        left = next(f for f in client.followers() if f.info.follower_id == "t-victim")
        done = _wait_until(lambda: (j := client.job(job.id)).state in TERMINAL_STATES and j, 120, "the job to finish")
        results = client.results(job.id)
    victim.stop()
    assert took < 5.0, f"the agent took {took:.1f} s to stop"
    assert left.state == "missing", left.state
    reasons = [h.reason or "" for h in given_back.history]
    assert any("t-victim stopped (SIGTERM) and gave its jobs back" in r for r in reasons), reasons
    assert not any("missed heartbeats" in r for r in reasons), reasons
    assert done.state == JobState.succeeded and (done.attempt, done.follower_id) == (2, "t-other"), (done.state, done.error)
    assert [p.point.index for p in results.points] == [0] and results.points[0].environment.follower_id == "t-other"
    record("fault", "follower agent sent SIGTERM mid-point",
           "job given back at once, not after missed heartbeats; succeeded on another follower (attempt 2), one "
           "result; the agent exited within 5 s")


def test_leader_restart_with_20_queued_jobs_runs_all_in_sjf_order(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    for fid in ("s-a", "s-b"):
        # Pure SJF (no wait bound): these jobs' estimates (0.1-1 s) are far below their real run time (a server
        # start each), so under the bound every job soon counts as overdue and the order turns FCFS. The bound is
        # tested on its own (tests/unit/follower/test_holding.py, bench/scheduler.py).
        fleet.start_follower(fid, env={"BENCHFLEET_FOLLOWER_WAIT_BOUND": "0"})
    with fleet.client() as client:
        for follower in client.followers():  # nobody takes work until the restart (followers of other tests too)
            assert _admin(fleet, "POST", f"/followers/{follower.info.follower_id}/drain").status_code == 200
    # Distinct estimates 0.1 s apart, so SJF order is unambiguous; 20 jobs run in ~11 s of measured time in all.
    seconds = [round(0.1 + 0.05 * k, 2) for k in range(20)]
    random.Random(5).shuffle(seconds)
    with fleet.client() as client:
        ids = [client.submit_yaml(_job_yaml(f"sjf-{i}", s)).id for i, s in enumerate(seconds)]
        assert all(client.job(j).state == JobState.queued for j in ids)
    # The leader's queue hands each follower its next job (placement_lookahead 1): exact SJF there too.
    fleet.env.update({"BENCHFLEET_LEADER_AGEING_PER_S": "0", "BENCHFLEET_LEADER_WAIT_BOUND": "0"})
    fleet.restart("leader")
    with fleet.client() as client:
        assert all(client.job(j).state == JobState.queued for j in ids), "the queue survived the restart"
        for fid in ("s-a", "s-b"):
            assert _admin(fleet, "POST", f"/followers/{fid}/resume").status_code == 200
        _wait_until(lambda: all(client.job(j).state in TERMINAL_STATES for j in ids), 240, "all 20 jobs to finish")
        views = [client.job(j) for j in ids]
    assert all(v.state == JobState.succeeded for v in views), [(v.name, v.state, v.error) for v in views
                                                               if v.state != JobState.succeeded]  # fmt: skip
    # Ranked by each job's load seconds: its stored estimate is the one made when it was placed, and jobs placed later
    # (the leader holds them back) carry corrections learned from the first ones' runs.
    load_s = dict(zip(ids, seconds, strict=True))
    per_follower: dict[str, list[tuple[object, float]]] = {}
    for v in views:
        started = [h.at for h in v.history if h.state == JobState.running][-1]
        per_follower.setdefault(v.follower_id or "", []).append((started, load_s[v.id]))
    for fid, runs in per_follower.items():
        sizes = [size for _, size in sorted(runs)]
        # The first job starts as soon as it arrives; every later one is the shortest of those waiting then.
        assert sizes[1:] == sorted(sizes[1:]), (fid, sizes)
    record("fault", "leader restarted with 20 jobs queued",
           "queue survived the restart; all 20 succeeded, each follower ran them shortest first")


def test_cancel_stops_the_running_point_and_the_follower_goes_on(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    fleet.start_follower("c-one")
    with fleet.client() as client:
        for follower in client.followers():  # only c-one takes work here (followers of other tests stay drained)
            if follower.info.follower_id != "c-one":
                _admin(fleet, "POST", f"/followers/{follower.info.follower_id}/drain")
        long_job = client.submit_yaml(_job_yaml("cancel-me", 60.0))
        marker = str(fleet.workdir / "c-one")
        # Running, with its model server up: the point is being measured.
        _wait_until(lambda: client.job(long_job.id).state == JobState.running and _servers_under(marker), 60, "the point")
        next_job = client.submit_yaml(_job_yaml("after-cancel", 0.5))
        response = _admin(fleet, "POST", f"/jobs/{long_job.id}/cancel")
        assert response.status_code == 200 and response.json()["state"] == "cancelled"
        # The heartbeat reply reaches the running point: it stops and its server with it, long before its 60 s.
        _wait_until(lambda: not _servers_under(marker), 20, "the cancelled job's model server to stop")
        done = _wait_until(lambda: (j := client.job(next_job.id)).state in TERMINAL_STATES and j, 60, "the next job")
        cancelled = client.job(long_job.id)
    assert done.state == JobState.succeeded and done.follower_id == "c-one", (done.state, done.error)
    assert cancelled.state == JobState.cancelled and cancelled.points_done == 0
    assert [h.state for h in cancelled.history][-1] == JobState.cancelled  # nothing after the cancel (no late finish)
    started_next = [h.at for h in done.history if h.state == JobState.running][-1]
    waited = (started_next - cancelled.updated_at).total_seconds()
    assert waited < 30, f"the follower took the next job {waited:.1f}s after the cancel, not after the 60 s point"
    assert not _servers_under(marker)


def test_split_sweep_runs_on_two_real_followers_and_merges_into_one_result(fleet, model: str) -> None:  # type: ignore[no-untyped-def]
    for fid in ("p-a", "p-b"):
        fleet.start_follower(fid)
    with fleet.client() as client:
        for follower in client.followers():  # only p-a and p-b take work here (followers of other tests are drained)
            if follower.info.follower_id not in ("p-a", "p-b"):
                _admin(fleet, "POST", f"/followers/{follower.info.follower_id}/drain")
        spec = _job_yaml("sweep", 0.5).replace("batch_sizes: [1]", "batch_sizes: [1, 2, 4, 8]") + "split: {max_parts: 2}\n"
        job = client.submit_yaml(spec)
        assert len(job.parts) == 2 and job.points_total == 4
        done = _wait_until(lambda: (j := client.job(job.id)).state in TERMINAL_STATES and j, 120, "the split job to finish")
        parts = [client.job(p) for p in job.parts]
        results = client.results(job.id)
    assert done.state == JobState.succeeded and done.points_done == 4, done.error
    assert {p.follower_id for p in parts} == {"p-a", "p-b"}, "each part ran on its own follower"
    assert all(p.state == JobState.succeeded and p.part_of == job.id for p in parts)
    # One result set: the grid's four points, numbered back into it, each measured by the follower that ran its part.
    assert [(p.point.index, p.point.batch_size) for p in results.points] == [(0, 1), (1, 2), (2, 4), (3, 8)]
    ran = {p.point.batch_size: p.environment.follower_id for p in results.points}
    assert ran[1] == ran[2] == parts[0].follower_id and ran[4] == ran[8] == parts[1].follower_id


def test_a_restarted_agent_takes_its_id_back_with_the_credential_it_kept(fleet, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import stat
    import uuid

    from common.wire.followers import FollowerInfo
    from follower.link.leader_client import LeaderClient
    from tests.integration.leader.conftest import follower_info

    follower_id = f"kept-{uuid.uuid4().hex[:6]}"
    kept = tmp_path / f"credential-{follower_id}"
    kept.write_text("bf_not_a_credential_this_leader_knows")  # another leader's, or a revoked one

    def agent(incarnation: str) -> LeaderClient:
        client = LeaderClient(fleet.url, fleet.follower_token, credential_path=kept)
        client.register(FollowerInfo.model_validate(follower_info(follower_id, incarnation)))
        return client

    first = agent(uuid.uuid4().hex)  # the unknown credential is dropped for the join token
    credential = kept.read_text()
    assert credential == first.credential() and stat.S_IMODE(kept.stat().st_mode) == 0o600
    # Restarted while the first still counts as live: it registers with its own credential (the join token would be
    # refused until the first went missing, and then be issued a new credential).
    second = agent(uuid.uuid4().hex)
    assert second.credential() == credential
    first.close()
    second.close()
