"""A job's data lifecycle against a real PerfDB: its footprint kind by kind; deleting it is refused while it runs, to
anyone but its owner or an admin, and while it is a baseline; once deleted, no document, file or chunk of it is left,
the leaderboard forgets it, and the audit keeps the deletion."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import bson
import pytest
from pymongo import AsyncMongoClient

from leader.store import jobs as jobs_store
from leader.store import progress as progress_store
from tests.integration.leader.analysis_seed import latencies, npz
from tests.integration.leader.conftest import ADMIN, YAML, Leader, point_result

pytestmark = pytest.mark.integration

SPEC = (
    "name: doomed\nmodel: ident:1\nbackends: [onnxruntime]\nbatch_sizes: [1, 8]\n"
    "load: {allow_short: true, rate: 5, duration: 2s}\n"
)


def _token(leader: Leader, user: str, role: str) -> dict[str, str]:
    made = leader.client.post("/api/v1/tokens", headers=ADMIN, json={"user": user, "role": role})
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def _save_progress(leader: Leader, job_id: str) -> None:
    """A window of live progress, stored as the telemetry server stores it."""

    async def run() -> None:
        client: AsyncMongoClient = AsyncMongoClient(leader.settings.mongo_uri, tz_aware=True)
        try:
            window = {"start_s": 0.0, "duration_s": 1.0, "requests": 5, "p50_ms": 1.0, "p99_ms": 2.0}
            db = client[leader.settings.db_name]
            await progress_store.save_windows(db, job_id=job_id, attempt=1, follower_id="f", index=0, windows=[window])
        finally:
            await client.close()

    asyncio.run(run())


def _mentions(leader: Leader, job_id: str) -> dict[str, int]:
    """Documents in any collection but the audit trail whose BSON holds the job's id."""
    out: dict[str, int] = {}
    needle = job_id.encode()
    for name in leader.db.list_collection_names():
        if name != "audit":
            hits = sum(needle in bson.encode(doc) for doc in leader.db[name].find())
            if hits:
                out[name] = hits
    return out


def _run(leader: Leader, sue: dict[str, str], agent: tuple[str, str]) -> str:
    """Sue's job, claimed by the one agent and running."""
    response = leader.client.post("/api/v1/jobs", headers={**sue, **YAML}, content=SPEC)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    job = leader.wait_dispatched(job_id)
    follower, incarnation = agent
    assert job["follower_id"] == follower
    body = {"attempt": job["attempt"], "follower_id": follower, "incarnation": incarnation}
    assert leader.client.post(f"/api/v1/jobs/{job_id}/claim", headers=leader.as_follower(follower), json=body).status_code == 200
    return job_id


def _finish(leader: Leader, job_id: str, follower: str) -> None:
    headers = leader.as_follower(follower)
    for index, batch in enumerate((1, 8)):
        result: dict[str, Any] = point_result(index, follower, batch=batch)
        report = {"attempt": 1, "follower_id": follower, "result": result}
        assert leader.client.post(f"/api/v1/jobs/{job_id}/points", headers=headers, json=report).status_code == 200
        blob = npz(latencies(500, scale_ms=2.0, seed=index), measured_s=result["measured_s"])
        stored = leader.client.post(
            f"/api/v1/jobs/{job_id}/points/{index}/records?attempt=1",
            headers={**headers, "Content-Type": "application/octet-stream"},
            content=blob,
        )
        assert stored.status_code == 204, stored.text
    done = {"attempt": 1, "follower_id": follower, "state": "succeeded"}
    assert leader.client.post(f"/api/v1/jobs/{job_id}/finish", headers=headers, json=done).status_code == 200


def test_a_deleted_job_leaves_nothing_behind(leader: Leader) -> None:
    leader.upload_model()
    sue, bob = _token(leader, "sue", "submitter"), _token(leader, "bob", "submitter")
    viewer = _token(leader, "vic", "viewer")
    agent = follower, _ = f"f-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    leader.register(*agent)
    job_id = _run(leader, sue, agent)
    running = leader.client.delete(f"/api/v1/jobs/{job_id}", headers=sue)
    assert running.status_code == 409 and running.json()["field"] == "state", running.text
    assert "cancel it first" in running.json()["message"]
    _save_progress(leader, job_id)
    _finish(leader, job_id, follower)
    keeper_id = _run(leader, sue, agent)  # another job of hers, which must survive
    _finish(leader, keeper_id, follower)

    held = leader.client.get(f"/api/v1/jobs/{job_id}/footprint", headers=viewer)
    assert held.status_code == 200, held.text
    kinds = {k: v["documents"] for k, v in held.json()["kinds"].items()}
    assert kinds == {
        "results": 2,
        "leaderboard rows": 2,
        "progress": 1,
        "raw records": 2,
        "imported files": 0,
        "shard barrier": 0,
        "shard records": 0,
        "job": 1,
    }
    assert held.json()["kinds"]["raw records"]["bytes"] > 1000 and held.json()["deleted"] is False
    assert _mentions(leader, job_id), "the job's data is there to be deleted"

    assert leader.client.delete(f"/api/v1/jobs/{job_id}", headers=viewer).status_code == 403  # a viewer deletes nothing
    theirs = leader.client.delete(f"/api/v1/jobs/{job_id}", headers=bob)
    assert theirs.status_code == 403 and theirs.json()["field"] == "owner"
    assert leader.client.put("/api/v1/baselines/spring", headers=sue, json={"job_id": job_id}).status_code == 200
    pinned = leader.client.delete(f"/api/v1/jobs/{job_id}", headers=sue)
    assert pinned.status_code == 409 and "baseline spring" in pinned.json()["message"]
    assert leader.client.put("/api/v1/baselines/spring", headers=sue, json={"job_id": keeper_id}).status_code == 200
    assert leader.client.get("/api/v1/leaderboard", headers=ADMIN).json()["total"] == 4  # both jobs are on the board

    chunks_before = leader.db["records.chunks"].count_documents({})
    gone = leader.client.delete(f"/api/v1/jobs/{job_id}", headers=sue)
    assert gone.status_code == 200, gone.text
    assert gone.json()["deleted"] is True and gone.json()["kinds"] == held.json()["kinds"]
    assert _mentions(leader, job_id) == {}
    # The lists' indexes drop it: its tombstone is named by its id's hash (and holds nothing else).
    tombstones = list(leader.db[jobs_store.TOMBSTONES].find({"_id": jobs_store.tombstone_key(job_id)}))
    assert len(tombstones) == 1 and set(tombstones[0]) == {"_id", "at"}, tombstones
    files = {f["_id"] for f in leader.db["records.files"].find()}
    assert all(c["files_id"] in files for c in leader.db["records.chunks"].find())  # no chunk of a deleted file
    assert leader.db["records.chunks"].count_documents({}) < chunks_before
    assert leader.client.get(f"/api/v1/jobs/{job_id}", headers=ADMIN).status_code == 404
    assert leader.client.delete(f"/api/v1/jobs/{job_id}", headers=ADMIN).status_code == 404
    board = leader.client.get("/api/v1/leaderboard", headers=ADMIN).json()
    assert board["total"] == 2 and {r["job_id"] for r in board["rows"]} == {keeper_id}
    assert leader.client.get(f"/api/v1/jobs/{keeper_id}/points/0/records", headers=ADMIN).status_code == 200
    audit = leader.client.get("/api/v1/audit", headers=ADMIN).json()
    assert ("sue", "DELETE", f"/api/v1/jobs/{job_id}", 200) in [(r["user"], r["method"], r["path"], r["status"]) for r in audit]


def _until(what: str, check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {timeout_s:.0f} s"
        time.sleep(0.05)


def test_retention_removes_raw_records_progress_and_audit_and_keeps_results(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(retention_records_days=0, retention_progress_days=0, retention_audit_days=0, retention_sweep_s=0.2)
    leader.upload_model()
    agent = follower, _ = f"f-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    leader.register(*agent)
    job_id = _run(leader, ADMIN, agent)
    _save_progress(leader, job_id)
    _finish(leader, job_id, follower)
    finished = datetime.now(UTC)

    def expired() -> bool:
        return leader.client.get(f"/api/v1/jobs/{job_id}/points/0/records", headers=ADMIN).status_code == 404

    _until("expired", expired)
    gone = leader.client.get(f"/api/v1/jobs/{job_id}/points/0/records", headers=ADMIN).json()
    assert "removed by retention" in gone["message"] and "its results stay" in gone["message"]
    assert leader.db["records.files"].count_documents({}) == 0 and leader.db["records.chunks"].count_documents({}) == 0
    assert leader.client.get(f"/api/v1/jobs/{job_id}", headers=ADMIN).json()["records_expired_at"] is not None
    results = leader.client.get(f"/api/v1/jobs/{job_id}/results", headers=ADMIN).json()
    assert [p["point"]["index"] for p in results["points"]] == [0, 1]  # the results stay
    _until("without progress", lambda: leader.db["progress"].count_documents({}) == 0)
    _until("without old audit entries", lambda: leader.db["audit"].count_documents({"at": {"$lt": finished}}) == 0)


def test_retention_removes_finished_jobs_but_a_baseline(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(retention_jobs_days=0, retention_sweep_s=0.2)
    leader.upload_model()
    agent = follower, _ = f"f-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    leader.register(*agent)
    kept = _run(leader, ADMIN, agent)
    assert leader.client.put("/api/v1/baselines/spring", headers=ADMIN, json={"job_id": kept}).status_code == 200
    _finish(leader, kept, follower)
    dropped = _run(leader, ADMIN, agent)
    _finish(leader, dropped, follower)
    _until("deleted", lambda: leader.client.get(f"/api/v1/jobs/{dropped}", headers=ADMIN).status_code == 404)
    assert _mentions(leader, dropped) == {}
    assert leader.client.get(f"/api/v1/jobs/{kept}", headers=ADMIN).json()["state"] == "succeeded"  # finished first, kept
    board = leader.client.get("/api/v1/leaderboard", headers=ADMIN).json()
    assert {r["job_id"] for r in board["rows"]} == {kept}
