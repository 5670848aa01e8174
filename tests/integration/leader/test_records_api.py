"""Raw per-request records: one npz blob per point and attempt in GridFS, uploaded by the follower, served to users."""

from __future__ import annotations

import uuid

import numpy as np

from common.wire.records import decode as decode_records
from follower.loadgen.records import LoadRecords, encode_records
from tests.integration.leader.conftest import ADMIN, Leader
from tests.integration.leader.test_scheduling import claim, fid

OCTET = {"Content-Type": "application/octet-stream"}


def _blob(n: int, seed: int) -> tuple[bytes, LoadRecords]:
    rng = np.random.default_rng(seed)
    records = LoadRecords.allocate(10**12, np.sort(rng.integers(0, 10**9, n)))
    records.sent_ns[:] = records.intended_ns + 1000
    records.done_ns[:] = records.sent_ns + rng.integers(10**5, 10**7, n)
    records.status[:] = 200
    return encode_records(records), records


def _claimed_job(leader: Leader) -> tuple[str, str]:
    """A job claimed by a new follower: (job id, follower id)."""
    leader.upload_model()
    job = leader.submit()
    follower, incarnation = fid(), uuid.uuid4().hex
    leader.register(follower, incarnation)
    leader.wait_dispatched(job["id"])
    assert claim(leader, job["id"], 1, follower, incarnation).status_code == 200
    return job["id"], follower


def test_upload_replace_download(leader: Leader) -> None:
    job_id, follower = _claimed_job(leader)
    path = f"/api/v1/jobs/{job_id}/points/1/records"
    auth = leader.as_follower(follower)

    assert leader.client.get(path, headers=ADMIN).status_code == 404
    first, _ = _blob(500, 1)
    second, records = _blob(700, 2)
    for blob in (first, second):  # a retried upload replaces, never duplicates
        response = leader.client.post(path, params={"attempt": 1}, headers={**auth, **OCTET}, content=blob)
        assert response.status_code == 204, response.text
    assert leader.db["records.files"].count_documents({"metadata.job_id": job_id}) == 1

    got = leader.client.get(path, headers=ADMIN)
    assert got.status_code == 200 and got.headers["content-type"] == "application/octet-stream"
    arrays = decode_records(got.content)
    np.testing.assert_array_equal(arrays["done_ns"], records.done_ns)
    assert arrays["intended_ns"].dtype == np.int64 and len(arrays["status"]) == 700

    # Wrong attempt → 409; a point outside the grid or a body that is not an npz → 422 naming the field.
    stale = leader.client.post(path, params={"attempt": 2}, headers={**auth, **OCTET}, content=second)
    assert stale.status_code == 409, stale.text
    outside = leader.client.post(path.replace("/1/", "/9/"), params={"attempt": 1}, headers={**auth, **OCTET}, content=second)
    assert outside.status_code == 422 and outside.json()["field"] == "index"
    junk = leader.client.post(path, params={"attempt": 1}, headers={**auth, **OCTET}, content=b"not a zip")
    assert junk.status_code == 422 and junk.json()["field"] == "(body)"
    missing = leader.client.post(path, headers={**auth, **OCTET}, content=second)
    assert missing.status_code == 422 and "attempt" in missing.text
    # Only the follower running the job (or an admin) may upload; nobody without a token may read.
    other = fid()
    leader.register(other)
    foreign = {**leader.as_follower(other), **OCTET}
    assert leader.client.post(path, params={"attempt": 1}, headers=foreign, content=second).status_code == 403
    assert leader.client.get(path).status_code == 401


def test_records_export_gives_every_stored_request_in_each_format(leader: Leader) -> None:
    """What the follower's writer stores (per-request columns beside the run's one start_ns) exports as one row per
    request, in every format; the run's start is a column of its own, repeated."""
    import csv
    import io
    import json

    import pyarrow.parquet as pq

    job_id, follower = _claimed_job(leader)
    blob, records = _blob(300, 3)
    path = f"/api/v1/jobs/{job_id}/points/1/records"
    stored = leader.client.post(path, params={"attempt": 1}, headers={**leader.as_follower(follower), **OCTET}, content=blob)
    assert stored.status_code == 204, stored.text
    bodies = {}
    for fmt in ("csv", "json", "parquet"):
        got = leader.client.get(f"{path}/export", params={"format": fmt}, headers=ADMIN)
        assert got.status_code == 200, (fmt, got.status_code, got.text[:300])
        bodies[fmt] = got.content
    rows = list(csv.DictReader(io.StringIO(bodies["csv"].decode())))
    as_json = json.loads(bodies["json"])
    table = pq.read_table(io.BytesIO(bodies["parquet"])).to_pydict()
    assert len(rows) == len(as_json) == len(table["intended_ns"]) == 300
    assert [int(r["done_ns"]) for r in rows] == records.done_ns.tolist() == [r["done_ns"] for r in as_json]
    assert table["status"] == [200] * 300 and {int(r["start_ns"]) for r in rows} == {records.start_ns}
