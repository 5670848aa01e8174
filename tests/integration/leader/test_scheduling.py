"""The job's way through the leader: placement on a follower's Celery queue, claim, reports, finish, requeues, restarts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pymongo import MongoClient

from common.wire.followers import Heartbeat
from common.wire.jobs import JobTask
from common.wire.messaging import RUN_JOB_TASK
from leader.app import create_app
from leader.store.followers import Beats
from tests.integration.leader.conftest import (
    ADMIN,
    FOLLOWER,
    Leader,
    SettingsFactory,
    follower_info,
    point_result,
    queued_messages,
)


def fid() -> str:
    """A follower id unique to the test, so Redis queues never mix between tests."""
    return f"f-{uuid.uuid4().hex[:10]}"


def claim(leader: Leader, job_id: str, attempt: int, follower_id: str, incarnation: str) -> Any:
    body = {"attempt": attempt, "follower_id": follower_id, "incarnation": incarnation}
    return leader.client.post(f"/api/v1/jobs/{job_id}/claim", headers=leader.as_follower(follower_id), json=body)


def post_as(leader: Leader, follower_id: str, path: str, body: dict[str, Any]) -> Any:
    """POST as the follower's own credential."""
    return leader.client.post(path, headers=leader.as_follower(follower_id), json=body)


def test_full_attempt(leader: Leader, redis_client: redis.Redis) -> None:
    leader.upload_model()
    job = leader.submit()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)

    assigned = leader.wait_dispatched(job["id"])
    assert assigned["follower_id"] == follower
    messages = queued_messages(redis_client, follower)
    assert len(messages) == 1
    assert messages[0]["task"] == RUN_JOB_TASK
    task = JobTask.model_validate(messages[0]["args"][0])
    assert (task.job_id, task.attempt, task.model.ref, len(task.points)) == (job["id"], 1, "ident:1", 2)
    assert leader.db.jobs.find_one({"_id": job["id"]})["dispatched"] is True

    granted = claim(leader, job["id"], 1, follower, incarnation)
    assert granted.status_code == 200, granted.text
    assert JobTask.model_validate(granted.json()) == task
    assert claim(leader, job["id"], 1, follower, incarnation).status_code == 409
    assert leader.job(job["id"])["state"] == "running"

    report = {"attempt": 1, "follower_id": follower, "result": point_result(1, follower, batch=8)}
    for _ in range(2):  # a retried report replaces, never duplicates
        response = post_as(leader, follower, f"/api/v1/jobs/{job['id']}/points", report)
        assert response.status_code == 200, response.text
    assert leader.db.results.count_documents({"job_id": job["id"]}) == 1
    assert leader.job(job["id"])["points_done"] == 1
    report0 = {"attempt": 1, "follower_id": follower, "result": point_result(0, follower)}
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/points", report0).status_code == 200
    out_of_range = {"attempt": 1, "follower_id": follower, "result": point_result(7, follower)}
    bad = post_as(leader, follower, f"/api/v1/jobs/{job['id']}/points", out_of_range)
    assert bad.status_code == 422 and bad.json()["field"] == "result.point.index"
    stale = {**report, "attempt": 2}
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/points", stale).status_code == 409

    finish = {"attempt": 1, "follower_id": follower, "state": "succeeded"}
    done = post_as(leader, follower, f"/api/v1/jobs/{job['id']}/finish", finish)
    assert done.status_code == 200 and done.json()["state"] == "succeeded"
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/finish", finish).status_code == 200
    failed = {**finish, "state": "failed", "error": "boom"}
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/finish", failed).status_code == 409
    late = post_as(leader, follower, f"/api/v1/jobs/{job['id']}/points", report)
    assert late.status_code == 409

    results = leader.client.get(f"/api/v1/jobs/{job['id']}/results", headers=ADMIN).json()
    assert results["job"]["state"] == "succeeded"
    assert results["job"]["points_done"] == 2
    assert [p["point"]["index"] for p in results["points"]] == [0, 1]
    assert results["points"][1]["point"]["batch_size"] == 8
    assert [h["state"] for h in results["job"]["history"]] == ["queued", "assigned", "running", "succeeded"]
    assert leader.client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=ADMIN).status_code == 409


def test_claim_needs_the_right_follower_and_incarnation(leader: Leader) -> None:
    leader.upload_model()
    job = leader.submit()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    leader.wait_state(job["id"], "assigned")
    assert claim(leader, job["id"], 1, follower, "someone-elses-incarnation").status_code == 409
    assert claim(leader, job["id"], 2, follower, incarnation).status_code == 409
    other = fid()
    leader.register(other)
    assert claim(leader, job["id"], 1, other, incarnation).status_code == 409
    assert claim(leader, "no-such-job", 1, follower, incarnation).status_code == 404
    leader.client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=ADMIN)
    assert claim(leader, job["id"], 1, follower, incarnation).status_code == 409


def test_placement_respects_backends_and_load(leader: Leader, redis_client: redis.Redis) -> None:
    leader.upload_model()
    triton_only = fid()
    leader.register(triton_only, backends=["triton"])
    job = leader.submit()
    time.sleep(3 * leader.settings.place_interval_s)  # a few placement ticks
    assert leader.job(job["id"])["state"] == "queued"  # nobody able: it waits

    a, b = fid(), fid()
    leader.register(a)
    leader.register(b)
    jobs = [job] + [leader.submit() for _ in range(3)]
    placed = [leader.wait_dispatched(j["id"])["follower_id"] for j in jobs]
    assert triton_only not in placed
    # Equal estimates: queue-aware placement alternates between the two able followers.
    assert sorted(placed) == sorted([a, a, b, b])
    assert len(queued_messages(redis_client, a)) == 2 and len(queued_messages(redis_client, b)) == 2

    followers = {f["info"]["follower_id"]: f for f in leader.client.get("/api/v1/followers", headers=ADMIN).json()}
    assert set(followers) == {triton_only, a, b}
    assert all(f["state"] == "ready" for f in followers.values())


def test_new_incarnation_requeues_running_job(leader: Leader, redis_client: redis.Redis) -> None:
    leader.upload_model()
    job = leader.submit()
    follower, first = fid(), uuid.uuid4().hex
    leader.register(follower, first)
    leader.wait_state(job["id"], "assigned")
    assert claim(leader, job["id"], 1, follower, first).status_code == 200

    second = uuid.uuid4().hex
    leader.register(follower, second, as_self=True)  # restarted, with the credential it kept
    # Requeued as attempt 2, then placed again on the (only) follower's new incarnation.
    again = leader.wait_dispatched(job["id"], attempt=2)
    reasons = [h["reason"] for h in again["history"]]
    assert f"follower {follower} restarted" in reasons
    assert leader.heartbeat(follower, first) is False
    assert leader.heartbeat(follower, second) is True
    # The old incarnation's reports are refused; the new one claims attempt 2.
    finish = {"attempt": 1, "follower_id": follower, "state": "succeeded"}
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/finish", finish).status_code == 409
    assert claim(leader, job["id"], 1, follower, second).status_code == 409
    assert claim(leader, job["id"], 2, follower, second).status_code == 200
    attempts = sorted(JobTask.model_validate(m["args"][0]).attempt for m in queued_messages(redis_client, follower))
    assert attempts == [1, 2]


def test_a_job_whose_follower_dies_running_it_twice_is_failed_not_walked_round_the_fleet(leader: Leader) -> None:
    """The attack: a model that kills the follower running it was requeued with no limit, killing the same follower at
    attempts 1, 2 and 3. Now the first loss is requeued, the second fails the job, naming why, and nothing queues it
    again; the follower itself stays usable."""
    job, follower, incarnation = _running_job(leader)
    for attempt in (1, 2):
        if attempt == 2:
            leader.wait_dispatched(job["id"], attempt=2)
            assert claim(leader, job["id"], 2, follower, incarnation).status_code == 200
        incarnation = uuid.uuid4().hex
        leader.register(follower, incarnation, as_self=True)  # it died running the job and came back as a new process
    view = leader.job(job["id"])
    assert view["state"] == "failed" and view["attempt"] == 2, view
    assert view["error"].startswith(f"its follower stopped while running it, twice (last: follower {follower} restarted"), view
    assert leader.heartbeat(follower, incarnation) is True


def test_a_leaving_follower_gives_its_jobs_back_at_once(leader: Leader) -> None:
    """An agent stopping (SIGTERM) says so: it is missing at once, its running job goes back to the queue with the
    reason (no heartbeat is missed first), its late reports are stale, a late beat does not revive it; only its own
    incarnation may leave."""
    job, follower, incarnation = _running_job(leader)
    wrong = post_as(leader, follower, f"/api/v1/followers/{follower}/leave", {"incarnation": "not-its-incarnation"})
    assert wrong.status_code == 404 and wrong.json()["field"] == "incarnation", wrong.text
    left = post_as(leader, follower, f"/api/v1/followers/{follower}/leave", {"incarnation": incarnation})
    assert left.status_code == 204, left.text
    view = leader.job(job["id"])
    assert view["state"] == "queued" and view["attempt"] == 2, view
    assert f"follower {follower} stopped (SIGTERM) and gave its jobs back" in [h["reason"] for h in view["history"]]
    listed = leader.client.get("/api/v1/followers", headers=ADMIN).json()
    assert next(f for f in listed if f["info"]["follower_id"] == follower)["state"] == "missing"
    finish = {"attempt": 1, "follower_id": follower, "state": "succeeded"}
    assert post_as(leader, follower, f"/api/v1/jobs/{job['id']}/finish", finish).status_code == 409
    assert leader.heartbeat(follower, incarnation) is False  # a beat sent before it stopped: not a comeback


def _running_job(leader: Leader) -> tuple[dict[str, Any], str, str]:
    """A job claimed by a newly registered follower: (the job, the follower's id, its incarnation)."""
    leader.upload_model()
    job = leader.submit()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    leader.wait_state(job["id"], "assigned")
    assert claim(leader, job["id"], 1, follower, incarnation).status_code == 200
    return job, follower, incarnation


def test_the_join_token_cannot_take_over_a_live_followers_id(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(missing_after_s=2.0)
    job, follower, first = _running_job(leader)
    # Anyone with the fleet's join token, claiming the live id under another incarnation: refused, nothing changes.
    info = follower_info(follower, uuid.uuid4().hex)
    taken = leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=info)
    assert taken.status_code == 409 and taken.json()["field"] == "follower_id", taken.text
    assert 1 <= int(taken.headers["Retry-After"]) <= 2
    assert leader.heartbeat(follower, first) is True  # its credential and incarnation still stand
    assert leader.job(job["id"])["attempt"] == 1  # its running job was not requeued
    # Once the live one has gone missing, the id is free to join again; an admin may take it over at any time.
    deadline = time.monotonic() + 15
    while (again := leader.client.post("/api/v1/followers/register", headers=FOLLOWER, json=info)).status_code == 409:
        assert time.monotonic() < deadline, again.text
        time.sleep(0.2)
    assert again.status_code == 200 and again.json()["credential"]
    admin = leader.client.post("/api/v1/followers/register", headers=ADMIN, json=follower_info(follower, uuid.uuid4().hex))
    assert admin.status_code == 200


def test_silent_follower_goes_missing_and_loses_its_job(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(missing_after_s=1.0)
    job, silent, incarnation = _running_job(leader)

    requeued = leader.wait_for(job["id"], lambda j: j["attempt"] == 2, timeout=10.0)
    assert requeued["state"] == "queued"
    assert requeued["follower_id"] is None
    assert requeued["history"][-1]["reason"] == f"follower {silent} missed heartbeats"
    followers = leader.client.get("/api/v1/followers", headers=ADMIN).json()
    assert followers[0]["state"] == "missing"

    assert lost_to(leader, job["id"]) == [f"{silent}/{incarnation}"]  # counted while it may have died

    # It comes back with the same incarnation: alive again (silent, not dead, so the lost run is forgiven), and the
    # queued job goes to it as attempt 2.
    assert leader.heartbeat(silent, incarnation, state="busy") is True
    assert leader.client.get("/api/v1/followers", headers=ADMIN).json()[0]["state"] == "busy"
    assert lost_to(leader, job["id"]) == []
    placed = leader.wait_for(job["id"], lambda j: j["state"] == "assigned")
    assert (placed["attempt"], placed["follower_id"]) == (2, silent)
    assert leader.heartbeat("never-registered", incarnation) is False

    # A starved host that goes silent again is not the job's doing: attempt 3, not a failure.
    assert claim(leader, job["id"], 2, silent, incarnation).status_code == 200
    again = leader.wait_for(job["id"], lambda j: j["attempt"] == 3, timeout=10.0)
    assert again["state"] == "queued" and lost_to(leader, job["id"]) == [f"{silent}/{incarnation}"]
    assert leader.heartbeat(silent, incarnation) is True
    assert lost_to(leader, job["id"]) == []  # heard again: forgiven again (a restart would have counted: the test above)


def test_a_follower_heard_again_while_its_jobs_are_requeued_is_forgiven(
    make_leader: Callable[..., Leader], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a full run once lost an LLM job to ("stopped while running it, twice"): the monitor read the follower as
    missing, its returning beat marked it live and forgave before the monitor's requeue wrote the loss, and the loss
    stood. Here the beat lands exactly there (at the requeue's seam), and the run lost is forgiven all the same."""
    from leader.placement import monitor
    from leader.store import assignments as assignments_store
    from leader.store import followers as followers_store

    requeue = assignments_store.requeue_follower_jobs
    follower: dict[str, str] = {}
    returned: list[str] = []

    async def beat_first(
        db: Any,
        *,
        follower_ids: list[str],
        reason: str,
        states: list[str] | None = None,
        lost: Mapping[str, str | None] | None = None,
    ) -> list[str]:
        if follower and follower["id"] in follower_ids and not returned:
            # The returning beat, as its route runs it: recorded live, then forgiven (nothing is lost yet).
            beat = Heartbeat(incarnation=follower["incarnation"], state="busy")
            said = await followers_store.heartbeat(db, follower_id=follower["id"], beat=beat, beats=Beats(), rewrite_after_s=0)
            returned.append(said)
            returned.extend(await assignments_store.forgive(db, follower_id=follower["id"], incarnation=follower["incarnation"]))
        return await requeue(db, follower_ids=follower_ids, reason=reason, states=states, lost=lost)

    tick = monitor.Monitor.tick
    ticks_done: list[list[str]] = []  # what each whole tick requeued (its second look included)

    async def recorded_tick(self: monitor.Monitor) -> list[str]:
        ticks_done.append(await tick(self))
        return ticks_done[-1]

    monkeypatch.setattr(monitor.assignments_store, "requeue_follower_jobs", beat_first)
    monkeypatch.setattr(monitor.Monitor, "tick", recorded_tick)
    leader = make_leader(missing_after_s=1.0)
    job, silent, incarnation = _running_job(leader)
    follower.update(id=silent, incarnation=incarnation)
    requeued = leader.wait_for(job["id"], lambda j: j["attempt"] == 2, timeout=10.0)
    # The loss is read once the tick that requeued the job has ended (its requeue is visible before its second look).
    deadline = time.monotonic() + 10.0
    while job["id"] not in [job_id for done in ticks_done for job_id in done]:
        assert time.monotonic() < deadline, "the tick that requeued the job never ended"
        time.sleep(0.05)
    assert returned == ["returned"]  # the beat's own forgive found nothing: the loss was not written yet
    assert f"follower {silent} missed heartbeats" in [entry.get("reason") for entry in requeued["history"]]
    assert lost_to(leader, job["id"]) == []  # without the monitor's second look: [f"{silent}/{incarnation}"]


def lost_to(leader: Leader, job_id: str) -> list[str]:
    """The follower processes the job's runs were lost to (as stored)."""
    return (leader.db["jobs"].find_one({"_id": job_id}, {"lost_to": 1}) or {}).get("lost_to") or []


def test_restart_keeps_queue_and_resends_undispatched(
    make_settings: SettingsFactory, mongo_client: MongoClient[dict[str, Any]], redis_client: redis.Redis
) -> None:
    settings = make_settings()
    db = mongo_client[settings.db_name]
    with TestClient(create_app(settings)) as client:
        first = Leader(client, settings, db)
        first.upload_model()
        waiting = first.submit()
        stranded = first.submit()
    # The leader "died" between assigning and sending: the job is assigned but no message was sent.
    follower, incarnation = fid(), uuid.uuid4().hex
    with TestClient(create_app(settings.model_copy(update={"place_interval_s": 60.0}))) as client:
        Leader(client, settings, db).register(follower, incarnation, backends=["nothing-matches"])
    db.jobs.update_one({"_id": stranded["id"]}, {"$set": {"state": "assigned", "follower_id": follower, "dispatched": False}})

    with TestClient(create_app(settings)) as client:
        second = Leader(client, settings, db)
        assert second.job(waiting["id"])["state"] == "queued"
        second.wait_dispatched(stranded["id"])
        assert [JobTask.model_validate(m["args"][0]).job_id for m in queued_messages(redis_client, follower)] == [stranded["id"]]
        assert second.job(waiting["id"])["state"] == "queued"  # the follower offers no matching backend
        assert claim(second, stranded["id"], 1, follower, incarnation).status_code == 200


def test_broker_down_keeps_the_job_queued(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(redis_url="redis://127.0.0.1:1/0")
    leader.upload_model()
    job = leader.submit()
    leader.register(fid())
    failed = leader.wait_for(job["id"], lambda j: any((h["reason"] or "").startswith("dispatch failed") for h in j["history"]))
    assert failed["attempt"] == 1
    stored = leader.db.jobs.find_one({"_id": job["id"]})
    assert stored["state"] in ("queued", "assigned")  # assigned only while the next try is in flight
    assert leader.client.get("/healthz").status_code == 503
    # Placement backs off while the broker is down: a second of outage adds only a few history entries.
    time.sleep(1.0)
    assert len(leader.job(job["id"])["history"]) <= 11


def test_a_job_whose_message_never_reached_the_follower_is_placed_again(make_leader: Callable[..., Leader]) -> None:
    """The broker can lose a message (a Redis restart while the consumer is handed it): the follower's heartbeats,
    which list what it holds, show the job never arrived, and the leader sends it again as a new attempt."""
    leader = make_leader(undelivered_after_s=0.5)
    leader.upload_model()
    job = leader.submit()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)

    def sent(attempt: int) -> bool:
        doc = leader.db["jobs"].find_one({"_id": job["id"]}) or {}
        return doc.get("state") == "assigned" and doc.get("attempt") == attempt and bool(doc.get("dispatched"))

    leader.wait_for(job["id"], lambda _j: sent(1))

    # Nobody consumes the follower's queue here: its heartbeats hold nothing, as after a lost message.
    def requeued_after_a_beat(j: dict[str, Any]) -> bool:
        leader.heartbeat(follower, incarnation)  # one heartbeat per poll
        return j["attempt"] == 2

    requeued = leader.wait_for(job["id"], requeued_after_a_beat, timeout=15.0)
    reasons = [h.get("reason") for h in requeued["history"]]
    assert f"follower {follower} never received it (the broker lost the message)" in reasons
    # A heartbeat that lists the job (its message arrived) leaves it alone, however long ago it was sent.
    leader.wait_for(job["id"], lambda _j: sent(2))
    # Aged well past undelivered_after_s (written, not slept): only the heartbeat's list can keep it.
    leader.db["jobs"].update_one({"_id": job["id"]}, {"$set": {"dispatched_at": datetime.now(UTC) - timedelta(seconds=60)}})
    body = {"incarnation": incarnation, "state": "ready", "held": [{"job_id": job["id"], "attempt": 2, "estimate_s": 1.0}]}
    response = leader.client.post(f"/api/v1/followers/{follower}/heartbeat", headers=leader.as_follower(follower), json=body)
    assert response.status_code == 200, response.text
    assert leader.job(job["id"])["attempt"] == 2
