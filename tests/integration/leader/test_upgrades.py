"""Upgrades against a real PerfDB: a database written by the previous schema is migrated at leader start, once (a second
run changes nothing), and read by the stores' one shape; a database ahead of the leader is refused; a follower is taken
or refused at registration by the contract it speaks, and one of another release is shown as such."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from common import __version__
from common.spec.grid import START_COST_S
from common.wire.compat import OLDEST_WIRE, WIRE
from leader.store import migrations
from tests.integration.leader.analysis_seed import pct, seed_job
from tests.integration.leader.conftest import ADMIN, FOLLOWER, Leader, follower_info

pytestmark = pytest.mark.integration


def _in_db(leader: Leader, work: Callable[[Any], Any]) -> Any:
    """Run `work(async database)` against the leader's database on a client of its own."""

    async def run() -> Any:
        client: AsyncMongoClient = AsyncMongoClient(leader.settings.mongo_uri, tz_aware=True)
        try:
            return await work(client[leader.settings.db_name])
        finally:
            await client.close()

    return asyncio.run(run())


def _as_previous_schema(leader: Leader) -> None:
    """Put the database back in the shape the leader before schema versions wrote: no team on any document, no owner on
    jobs and baselines, no measured seconds or spec estimate on jobs, leaderboard rows without environment or samples/s
    but with the in-memory index's sync stamp, nothing counting them, no follower approved, no schema record."""
    db = leader.db
    for collection in migrations.TEAM_COLLECTIONS:
        db[collection].update_many({}, {"$unset": {"team": ""}})
    for collection in migrations.OWNER_COLLECTIONS:
        db[collection].update_many({}, {"$unset": {"owner": ""}})
    db["jobs"].update_many({}, {"$unset": {"measured_s": "", "base_estimate_s": ""}})
    db["followers"].update_many({}, {"$unset": {"approved": ""}})
    db["leaderboard"].update_many({}, {"$unset": {"environment": "", "samples_per_s": ""}, "$set": {"updated_ns": 1}})
    for collection in ("leaderboard_counts", "leaderboard_ties", "leaderboard_best"):
        db.drop_collection(collection)
    db[migrations.META].delete_many({})


def test_a_database_of_the_previous_schema_is_migrated_once_and_read(make_leader: Callable[..., Leader]) -> None:
    old = make_leader()
    old.upload_model()
    job_id = seed_job(
        old,
        name="before",
        backends=["onnxruntime"],
        batches=[1],
        rates=[10.0],
        p99_slo=50.0,
        follower_id="host-a",
        metrics=lambda *_: {"latency_ms": pct(5.0)},
    )
    assert old.client.put("/api/v1/baselines/spring", headers=ADMIN, json={"job_id": job_id}).status_code in (200, 204)
    old.register("joined-before")
    viewer = old.client.post("/api/v1/tokens", headers=ADMIN, json={"user": "pat", "role": "viewer"}).json()["token"]
    assert old.db[migrations.META].find_one({"_id": migrations.SCHEMA_ID})["version"] == migrations.SCHEMA_VERSION
    row = old.db["leaderboard"].find_one({"job_id": job_id})
    environment, estimate = row["environment"], old.db["jobs"].find_one({"_id": job_id})["estimate_s"]
    assert environment["host"] == "host-a"
    old.stop()
    _as_previous_schema(old)

    new = make_leader()  # the same database: its start migrates it
    assert new.db.name == old.db.name
    record = new.db[migrations.META].find_one({"_id": migrations.SCHEMA_ID})
    assert record["version"] == migrations.SCHEMA_VERSION
    assert [(a["version"], a["by"]) for a in record["applied"]] == [(m.version, __version__) for m in migrations.MIGRATIONS]
    assert all(a["changed"] > 0 for a in record["applied"]), record["applied"]
    # Read through the stores' one shape: the team's viewer sees the job, the admin owns it, the row is comparable.
    seen = new.client.get(f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {viewer}"})
    assert seen.status_code == 200, seen.text
    assert seen.json()["team"] == "default" and seen.json()["owner"] == "admin"
    job = new.db["jobs"].find_one({"_id": job_id})
    assert job["base_estimate_s"] == estimate
    assert job["measured_s"] == pytest.approx(max(0.0, estimate - START_COST_S * 1))
    assert new.db["leaderboard"].find_one({"job_id": job_id})["environment"] == environment
    assert new.db["baselines"].find_one({"_id": "spring"})["owner"] == "admin"
    compared = new.client.get("/api/v1/compare", params={"a": job_id, "b": job_id}, headers=ADMIN)
    assert compared.status_code == 200, compared.text
    assert [p["comparable"].split(" (")[0] for p in compared.json()["points"]] == ["comparable"]
    # The rows were counted: the leaderboard pages them from PerfDB, the best under SLO marked, samples/s stored.
    board = new.client.get("/api/v1/leaderboard", headers=ADMIN, params={"sort": "samples_per_s", "order": "desc"}).json()
    assert board["total"] == 1 and board["total_exact"] and board["rows"][0]["best"], board
    assert board["rows"][0]["samples_per_s"] == pytest.approx(board["rows"][0]["throughput"])
    assert "updated_ns" not in new.db["leaderboard"].find_one({"job_id": job_id})
    # A follower that joined before approval existed was trusted then: it stays approved, not pending.
    assert new.db["followers"].find_one({"_id": "joined-before"})["approved"] is True

    # Run again: nothing above the version runs, and each migration finds nothing left in the old shape.
    assert _in_db(new, migrations.migrate) == []
    assert [_in_db(new, m.apply) for m in migrations.MIGRATIONS] == [0] * len(migrations.MIGRATIONS)


def test_a_database_ahead_of_the_leader_is_refused(leader: Leader) -> None:
    leader.db[migrations.META].update_one({"_id": migrations.SCHEMA_ID}, {"$set": {"version": migrations.SCHEMA_VERSION + 1}})
    with pytest.raises(migrations.SchemaTooNew, match=f"schema version {migrations.SCHEMA_VERSION + 1}, newer than"):
        _in_db(leader, migrations.migrate)


def _register(leader: Leader, body: dict[str, Any], headers: dict[str, str] = FOLLOWER) -> Any:
    return leader.client.post("/api/v1/followers/register", headers=headers, json=body)


def test_a_follower_is_taken_or_refused_by_the_contract_it_speaks(leader: Leader) -> None:
    older = {**follower_info("f-old", uuid.uuid4().hex), "version": "0.0.9", "wire": OLDEST_WIRE}
    taken = _register(leader, older)
    assert taken.status_code == 200, taken.text
    note = f"older release 0.0.9 (the leader runs {__version__}); compatible contract"
    assert taken.json()["release_note"] == note
    listed = {f["info"]["follower_id"]: f for f in leader.client.get("/api/v1/followers", headers=ADMIN).json()}
    assert listed["f-old"]["release_note"] == note and listed["f-old"]["info"]["version"] == "0.0.9"
    same = _register(leader, follower_info("f-same", uuid.uuid4().hex))
    assert same.status_code == 200 and same.json()["release_note"] is None

    unversioned = follower_info("f-unversioned", uuid.uuid4().hex)
    del unversioned["wire"]
    newer = {**follower_info("f-newer", uuid.uuid4().hex), "wire": WIRE + 1, "a_field_of_the_future": True}
    ancient = {**follower_info("f-ancient", uuid.uuid4().hex), "wire": OLDEST_WIRE - 1}
    for body, says in (
        (unversioned, "upgrade the follower"),
        (newer, "upgrade the leader first"),
        (ancient, "upgrade the follower"),
    ):
        refused = _register(leader, body)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "incompatible" and refused.json()["field"] == "wire"
        assert says in refused.json()["message"] and f"benchfleet {__version__}" in refused.json()["message"]
    # A stranger learns nothing of the leader's release; a bad body of the right contract is still a 422 on its field.
    assert _register(leader, newer, headers={}).status_code == 401
    assert _register(leader, {**follower_info("f-bad", uuid.uuid4().hex), "cpu_count": "many"}).status_code == 422
    known = {f["info"]["follower_id"] for f in leader.client.get("/api/v1/followers", headers=ADMIN).json()}
    assert known == {"f-old", "f-same"}
