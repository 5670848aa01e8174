"""Model uploads stream into GridFS chunk by chunk; a broken upload leaves no visible model and no orphan chunk."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import io
import json
import secrets
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple

import httpx
import pytest
from pymongo import AsyncMongoClient
from pymongo.database import Database

from benchfleet.stack import LocalStack
from common.wire.models import ModelMeta
from leader.clock import utcnow
from leader.store import models as models_store
from tests.conftest import Service
from tests.faults.outcomes import record
from tests.integration.leader.conftest import ADMIN, Leader

SIGNATURE = json.dumps(
    {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
    }
)


def _clean(db: Database) -> None:  # type: ignore[type-arg]
    """No model document, no GridFS file, no GridFS chunk."""
    assert db.models.count_documents({}) == 0
    assert db["models.files"].count_documents({}) == 0
    assert db["models.chunks"].count_documents({}) == 0


def test_large_upload_is_stored_in_many_chunks_and_reads_back_identical(leader: Leader) -> None:
    data = secrets.token_bytes(3 * 1024 * 1024 + 17)  # past the 1 MiB in-memory spool: read back from disk
    response = leader.client.post(
        "/api/v1/models",
        headers=ADMIN,
        data={"name": "big", "version": "1", "format": "torchscript", "signature": SIGNATURE},
        files={"file": ("big.pt", data, "application/octet-stream")},
    )
    assert response.status_code == 201, response.text
    meta = response.json()
    assert meta["size_bytes"] == len(data) and meta["sha256"] == hashlib.sha256(data).hexdigest()
    [stored] = leader.db.models.find({})
    assert leader.db["models.chunks"].count_documents({"files_id": stored["gridfs_id"]}) == -(-len(data) // (255 * 1024))
    download = leader.client.get("/api/v1/models/big/1/file", headers=ADMIN)
    assert download.status_code == 200 and download.content == data


def test_streamed_body_past_the_limit_is_413_and_stores_nothing(make_leader: Callable[..., Leader]) -> None:
    leader = make_leader(max_upload_bytes=64 * 1024)
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nm\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="version"\r\n\r\n1\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="m.onnx"\r\n\r\n'
    ).encode()
    sent = 0

    def body() -> Iterator[bytes]:  # chunked, no Content-Length: only counting while streaming can stop it
        nonlocal sent
        yield head
        for _ in range(64):
            sent += 16 * 1024
            yield b"\x00" * 16 * 1024
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {**ADMIN, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    response = leader.client.post("/api/v1/models", headers=headers, content=body())
    assert response.status_code == 413 and response.json()["field"] == "(body)", response.text
    _clean(leader.db)


@pytest.mark.parametrize(
    ("fmt", "content", "field"), [("onnx", b"not a model" * 1000, "file"), ("torchscript", b"x" * 1000, "signature")]
)
def test_failed_format_check_stores_nothing(leader: Leader, fmt: str, content: bytes, field: str) -> None:
    response = leader.client.post(
        "/api/v1/models", headers=ADMIN, data={"name": "bad", "version": "1", "format": fmt}, files={"file": ("bad", content)}
    )
    assert response.status_code == 422 and response.json()["field"] == field, response.text
    _clean(leader.db)
    record(
        "bad input",
        f"model upload failing the format check ({fmt})",
        f"422 naming `{field}`; no model, no GridFS file or chunk stored",
    )


def test_a_signature_nested_past_the_parsers_stack_is_a_refusal(leader: Leader) -> None:
    deep = '{"inputs": ' + "[" * 100_000 + "]" * 100_000 + ', "outputs": []}'  # was a RecursionError: a 500
    response = leader.client.post("/api/v1/models", headers=ADMIN,
                                  data={"name": "deep", "version": "1", "format": "torchscript", "signature": deep},
                                  files={"file": ("m.pt", b"x" * 100)})  # fmt: skip
    assert response.status_code == 422 and response.json()["field"] == "signature", response.text
    _clean(leader.db)


def test_gridfs_write_broken_midway_leaves_no_chunk(mongo_service: Service, mongo_client) -> None:  # type: ignore[no-untyped-def]
    db_name = f"upload_{uuid.uuid4().hex[:8]}"
    payload = secrets.token_bytes(1024 * 1024)
    meta = ModelMeta(
        name="half",
        version="1",
        format="onnx",
        inputs=[],
        outputs=[],
        sha256=hashlib.sha256(payload).hexdigest(),
        size_bytes=len(payload),
        created_at=utcnow(),
    )

    async def scenario() -> tuple[int, int]:
        client: AsyncMongoClient = AsyncMongoClient(mongo_service.url)
        db = client[db_name]
        try:

            async def broken() -> AsyncIterator[bytes]:
                for i in range(3):  # three 255 KiB chunks reach GridFS, then the source breaks
                    yield payload[i * 255 * 1024 : (i + 1) * 255 * 1024]
                raise ConnectionResetError("client went away")

            with pytest.raises(ConnectionResetError):
                await models_store.insert_model_stream(db, meta=meta, chunks=broken())

            stalled = asyncio.Event()

            async def stalls() -> AsyncIterator[bytes]:
                yield payload[: 255 * 1024]
                yield payload[255 * 1024 : 510 * 1024]
                stalled.set()
                await asyncio.Event().wait()  # the rest never comes
                yield b""

            task = asyncio.create_task(models_store.insert_model_stream(db, meta=meta, chunks=stalls()))
            await stalled.wait()
            task.cancel()  # what a disconnected client's request task sees
            with pytest.raises(asyncio.CancelledError):
                await task
            return await db["models.chunks"].count_documents({}), await models_store.orphan_chunks(db)
        finally:
            await client.close()

    chunks, orphans = asyncio.run(scenario())
    db = mongo_client[db_name]
    assert (chunks, orphans) == (0, 0)
    _clean(db)


class LeaderProcess(NamedTuple):
    address: str
    db_name: str
    admin: str
    pid: int


@pytest.fixture(scope="module")
def leader_process(
    mongo_service: Service, redis_service: Service, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LeaderProcess]:
    """A real leader process (uvicorn): only a real server sees a client vanish mid-body, and has a memory to measure."""
    db_name = f"upload_{uuid.uuid4().hex[:8]}"
    stack = LocalStack(tmp_path_factory.mktemp("upload"), mongo_uri=mongo_service.url, redis_url=redis_service.url,
                       db_name=db_name, base_env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    with stack:
        process = stack.start_leader()
        assert process.pid is not None
        yield LeaderProcess(f"127.0.0.1:{stack.leader_port}", db_name, stack.admin_token, process.pid)


def test_client_disconnect_midway_leaves_no_model_and_no_chunk(leader_process: LeaderProcess, mongo_client) -> None:  # type: ignore[no-untyped-def]
    address, db_name, admin, _ = leader_process
    host, port = address.split(":")
    boundary = "cut"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nhalf\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="version"\r\n\r\n1\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="m.onnx"\r\n\r\n'
    ).encode()
    declared = len(head) + 8 * 1024 * 1024
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            (
                f"POST /api/v1/models HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {admin}\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {declared}\r\n\r\n"
            ).encode()
        )
        sock.sendall(head + b"\x00" * (3 * 1024 * 1024))  # 3 of the 8 MiB promised, then the client vanishes
    db = mongo_client[db_name]
    # The leader still serves (and a later upload of the same name:version is not blocked by leftovers).
    with httpx.Client(base_url=f"http://{address}", headers={"Authorization": f"Bearer {admin}"}) as http:
        assert http.get("/healthz").status_code == 200
        _clean(db)
        form = {"name": "half", "version": "1", "format": "torchscript", "signature": SIGNATURE}
        again = http.post("/api/v1/models", data=form, files={"file": ("m.pt", b"y" * 300_000)})
        assert again.status_code == 201, again.text
    assert db["models.chunks"].count_documents({}) == 2
    record(
        "fault",
        "client disconnects midway through a model upload (3 of 8 MiB sent)",
        "no model visible, no GridFS file or chunk left; the same name:version uploads fine afterwards",
    )


def test_what_a_crashed_upload_left_behind_is_collected_once_it_is_old(mongo_service: Service) -> None:
    from datetime import timedelta

    from bson import ObjectId
    from gridfs import AsyncGridFSBucket

    from leader.store.gridfs_files import IN_PROGRESS
    from leader.store.leaderboard import row_from_result, write_row
    from leader.store.orphans import collect_orphans

    db_name = f"orphans_{uuid.uuid4().hex[:8]}"
    now = utcnow()
    old, recent, busy, unpublished, published = (ObjectId.from_datetime(now - timedelta(hours=h)) for h in (3, 0, 5, 2, 4))
    lost_import, kept_import = ObjectId.from_datetime(now - timedelta(hours=2)), ObjectId.from_datetime(now - timedelta(hours=3))

    async def scenario() -> tuple[dict[str, int], dict[str, int], set[str]]:
        client: AsyncMongoClient = AsyncMongoClient(mongo_service.url)
        db = client[db_name]
        try:
            chunk = {"n": 0, "data": b"x" * 1024}
            # A model upload killed mid-stream (chunks, no file), one still streaming (recent), one this leader is
            # streaming now however old; a data set stored but never published; a published one.
            await db["models.chunks"].insert_many([{**chunk, "files_id": old}, {**chunk, "files_id": recent},
                                                  {**chunk, "files_id": busy}])  # fmt: skip
            data = AsyncGridFSBucket(db, bucket_name="data")
            await data.upload_from_stream_with_id(unpublished, "lost.npz", b"lost")
            await data.upload_from_stream_with_id(published, "kept.npz", b"kept")
            await db["datasets"].insert_one({"_id": "d1", "gridfs_id": published})
            # An import whose job's document never came (its files, a result and a row written), and one that did.
            imported = AsyncGridFSBucket(db, bucket_name="imported")
            await imported.upload_from_stream_with_id(lost_import, "a.json", b"{}", metadata={"job_id": "lost", "name": "a.json"})
            await imported.upload_from_stream_with_id(kept_import, "b.json", b"{}", metadata={"job_id": "kept", "name": "b.json"})
            await db["jobs"].insert_one({"_id": "kept"})
            await db["results"].insert_many([{"_id": "lost:1:0", "job_id": "lost"}, {"_id": "kept:1:0", "job_id": "kept"}])
            for job_id in ("lost", "kept"):
                point = {"index": 0, "backend": "endpoint", "pattern": "poisson", "rate": 4.0}
                row = row_from_result(
                    job_id=job_id, job_name=job_id, model="m", slo_p99_ms=None, attempt=1, result={"point": point}
                )
                await write_row(db, row)
            IN_PROGRESS.add(busy)
            try:
                removed = await collect_orphans(db, older_than=now - timedelta(hours=1))
                again = await collect_orphans(db, older_than=now - timedelta(hours=1))
                left = {str(d["files_id"]) async for d in db["models.chunks"].find({}, {"files_id": 1})}
                left |= {str(d["_id"]) async for d in db["data.files"].find({}, {"_id": 1})}
                left |= {str(d["_id"]) async for d in db["imported.files"].find({}, {"_id": 1})}
                left |= {d["_id"] async for d in db["results"].find({}, {"_id": 1})}
                left |= {d["_id"] async for d in db["leaderboard"].find({}, {"_id": 1})}
            finally:
                IN_PROGRESS.discard(busy)
            return removed, again, left
        finally:
            await client.drop_database(db_name)
            await client.close()

    removed, again, left = asyncio.run(scenario())
    assert removed == {"models": 1, "data": 1, "records": 0, "imported": 1}, removed
    assert again == {"models": 0, "data": 0, "records": 0, "imported": 0}  # nothing more, and the sweep is idempotent
    # Recent, in progress and published stay; the interrupted import's file, result and row are gone.
    assert left == {str(recent), str(busy), str(published), str(kept_import), "kept:1:0", "kept:0"}


class _Junk(io.RawIOBase):
    """`size` bytes of zeros (no valid model), produced as read, never held: the upload of a big junk file. Once
    `hold_at` bytes are out it waits for `go` (the leader has by then read most of them: it is inside the upload)."""

    def __init__(self, size: int, hold_at: int, go: threading.Event, held: threading.Semaphore) -> None:
        self.left, self.hold_at, self.go, self.held = size, hold_at, go, held
        self.sent = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.sent >= self.hold_at and not self.go.is_set():
            self.held.release()
            assert self.go.wait(120)
        n = min(len(buffer), self.left, 1024 * 1024)
        buffer[:n] = bytes(n)
        self.left -= n
        self.sent += n
        return n


SMALL_FORM = {"name": "small", "version": "1"}  # a small junk model's upload


def _memory_kb(pid: int, field: str) -> int:
    """A field of the process's /proc status (VmRSS, VmHWM), in kB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(f"{field}:"))


def test_four_concurrent_400_mib_uploads_keep_the_leader_small_and_a_third_of_one_users_is_429(
    leader_process: LeaderProcess,
) -> None:
    """The attack: four concurrent 400 MiB junk models took the leader from 430 MB to 1,969 MB. Now each arrives into
    a spool on disk and is checked one at a time from there: the leader's peak memory grows by under 200 MB (VmHWM,
    reset before). Two users send two each (the most one user may have in progress); a third of one user's, sent
    while its two are arriving, is refused at once (429, Retry-After), before its body is read."""
    address, _, admin, pid = leader_process
    with httpx.Client(base_url=f"http://{address}", headers={"Authorization": f"Bearer {admin}"}) as http:
        tokens = [http.post("/api/v1/tokens", json={"user": u, "role": "submitter"}).json()["token"] for u in ("ann", "bob")]
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")  # resets VmHWM to the current RSS: the peak from here on
    before_kb = _memory_kb(pid, "VmRSS")
    go, held = threading.Event(), threading.Semaphore(0)
    size, hold_at = 400 * 1024 * 1024, 64 * 1024 * 1024  # the leader has read ≥ 58 MiB of each when it holds

    def upload(token: str, i: int) -> httpx.Response:
        with httpx.Client(base_url=f"http://{address}", headers={"Authorization": f"Bearer {token}"}, timeout=300) as http:
            junk = _Junk(size, hold_at, go, held)
            return http.post("/api/v1/models", data={"name": f"junk{i}", "version": "1"}, files={"file": ("junk.onnx", junk)})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        sent = [pool.submit(upload, tokens[i % 2], i) for i in range(4)]
        try:
            for _ in sent:  # every upload is inside the leader, reading its body
                assert held.acquire(timeout=120)
            with httpx.Client(base_url=f"http://{address}", headers={"Authorization": f"Bearer {tokens[0]}"}) as http:
                third = http.post("/api/v1/models", data=SMALL_FORM, files={"file": ("m.onnx", bytes(1000))})
        finally:
            go.set()
        answers = [f.result() for f in sent]
    assert third.status_code == 429 and third.json()["field"] == "file", third.text
    assert third.headers["Retry-After"] == "5" and "2 of your uploads are in progress" in third.json()["message"]
    assert [a.status_code for a in answers] == [422] * 4, [a.text[:200] for a in answers]
    assert all(a.json()["field"] == "file" for a in answers)
    grown_mb = (_memory_kb(pid, "VmHWM") - before_kb) / 1024
    assert grown_mb < 200, f"the leader's peak memory grew by {grown_mb:.0f} MB for 4 × 400 MiB uploads"
    with httpx.Client(base_url=f"http://{address}", headers={"Authorization": f"Bearer {tokens[0]}"}) as http:
        again = http.post("/api/v1/models", data=SMALL_FORM, files={"file": ("m.onnx", bytes(1000))})
    assert again.status_code == 422, again.text  # its slots are free again: refused for what it is, not for a slot
