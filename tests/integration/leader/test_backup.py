"""Backup and restore of the whole PerfDB with the CLI, against a real database: backup, wipe, restore gives the same
checksums, the same results, the same model bytes and raw records through a new leader; a restore refuses a database
that is not empty, a damaged archive (writing nothing) and an archive of a newer schema."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pymongo import MongoClient

from leader.store import backup, migrations
from tests.integration.leader.analysis_seed import latencies, pct, seed_job
from tests.integration.leader.conftest import ADMIN, Leader

pytestmark = pytest.mark.integration


def _cli(leader: Leader, *args: str, db: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "COLUMNS": "200"}
    env["BENCHFLEET_LEADER_MONGO_URI"] = leader.settings.mongo_uri
    argv = [sys.executable, "-m", "benchfleet", *args, "--db", db or leader.settings.db_name]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def _manifest(path: Path) -> dict[str, Any]:
    with tarfile.open(path) as tar:
        handle = tar.extractfile(backup.MANIFEST)
        assert handle is not None
        return json.loads(handle.read())


def _rewrite(source: Path, target: Path, change: Callable[[str, bytes], bytes]) -> None:
    """A copy of an archive with each member's bytes passed through `change(name, bytes)`."""
    with tarfile.open(source) as src, tarfile.open(target, "w") as out:
        for member in src:
            handle = src.extractfile(member)
            assert handle is not None
            data = change(member.name, handle.read())
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


def _seen(leader: Leader, job_id: str) -> dict[str, Any]:
    """What a user reads of the job: its results, the model's bytes and a point's raw records."""
    model = leader.client.get("/api/v1/models/ident/1/file", headers=ADMIN)
    records = leader.client.get(f"/api/v1/jobs/{job_id}/points/0/records", headers=ADMIN)
    assert model.status_code == 200 and records.status_code == 200
    return {
        "results": leader.client.get(f"/api/v1/jobs/{job_id}/results", headers=ADMIN).json(),
        "model_sha256": hashlib.sha256(model.content).hexdigest(),
        "records": records.content,
    }


def test_backup_wipe_restore_gives_the_same_data(
    make_leader: Callable[..., Leader], mongo_client: MongoClient[dict[str, Any]], tmp_path: Path
) -> None:
    first = make_leader()
    meta = first.upload_model()
    job_id = seed_job(
        first,
        name="kept",
        backends=["onnxruntime"],
        batches=[1],
        rates=[10.0, 20.0],
        p99_slo=50.0,
        follower_id="host-a",
        metrics=lambda *_: {"latency_ms": pct(5.0)},
        raw=lambda _b, _n, rate: latencies(400, scale_ms=2.0, seed=int(rate)),
    )
    before = _seen(first, job_id)
    assert before["model_sha256"] == meta["sha256"]
    first.stop()

    archive = tmp_path / "perfdb.tar"
    made = _cli(first, "backup", str(archive))
    assert made.returncode == 0, made.stderr
    assert "backed up" in made.stdout and first.settings.mongo_uri not in made.stdout + made.stderr
    manifest = _manifest(archive)
    assert manifest["schema_version"] == migrations.SCHEMA_VERSION
    counts = {name: c["documents"] for name, c in manifest["collections"].items()}
    assert counts["jobs"] == 1 and counts["results"] == 2 and counts["models.files"] == 1 and counts["records.files"] == 2
    assert counts["records.chunks"] >= 2 and counts["models.chunks"] >= 1

    mongo_client.drop_database(first.settings.db_name)
    assert mongo_client[first.settings.db_name].list_collection_names() == []
    restored = _cli(first, "restore", str(archive))
    assert restored.returncode == 0, restored.stderr
    again = _cli(first, "restore", str(archive))
    assert again.returncode == 2 and "is not empty" in again.stderr  # never over what a database holds, unless told
    assert _cli(first, "restore", str(archive), "--replace").returncode == 0

    second = tmp_path / "again.tar"
    assert _cli(first, "backup", str(second)).returncode == 0
    sums = {name: c["sha256"] for name, c in _manifest(second)["collections"].items()}
    assert sums == {name: c["sha256"] for name, c in manifest["collections"].items()}
    after = _seen(make_leader(), job_id)  # a new leader on the restored database reads what the first one did
    assert after == before


def test_a_restore_refuses_a_damaged_or_newer_archive_and_writes_nothing(
    leader: Leader, mongo_client: MongoClient[dict[str, Any]], tmp_path: Path
) -> None:
    leader.upload_model()
    archive = tmp_path / "perfdb.tar"
    assert _cli(leader, "backup", str(archive)).returncode == 0
    empty = f"{leader.settings.db_name}_copy"

    def flip(name: str, data: bytes) -> bytes:
        if name != "models.chunks.bson":
            return data
        raw = np.frombuffer(data, dtype=np.uint8).copy()
        raw[len(raw) // 2] ^= 0xFF
        return raw.tobytes()

    def newer(name: str, data: bytes) -> bytes:
        if name != backup.MANIFEST:
            return data
        return json.dumps({**json.loads(data), "schema_version": migrations.SCHEMA_VERSION + 1}).encode()

    for change, says in ((flip, "models.chunks"), (newer, f"schema version {migrations.SCHEMA_VERSION + 1}")):
        bad = tmp_path / f"{change.__name__}.tar"
        _rewrite(archive, bad, change)
        refused = _cli(leader, "restore", str(bad), db=empty)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert says in refused.stderr
        assert mongo_client[empty].list_collection_names() == []
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not an archive at all")
    refused = _cli(leader, "restore", str(garbage), db=empty)
    assert refused.returncode == 2 and "not" in refused.stderr
