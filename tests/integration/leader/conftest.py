"""The leader app in-process (TestClient, lifespan on) against the session's real Redis and SecantusDB."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from pymongo import MongoClient
from pymongo.database import Database

from common import __version__
from common.wire.compat import WIRE
from common.wire.messaging import queue_for
from leader.app import create_app
from leader.settings import LeaderSettings
from tests.conftest import Service
from tests.unit.leader.onnx_models import identity_model

ADMIN_TOKEN = "admin-token-for-tests-0001"
FOLLOWER_TOKEN = "follower-token-for-tests-01"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
FOLLOWER = {"Authorization": f"Bearer {FOLLOWER_TOKEN}"}
YAML = {"Content-Type": "application/yaml"}

SPEC_YAML = """\
name: smoke
model: {model}
backends: [onnxruntime]
batch_sizes: [1, 8]
load:
  rate: 50
  duration: 2s
  warmup: 500ms
  allow_short: true
"""

SettingsFactory = Callable[..., LeaderSettings]


@pytest.fixture(scope="session")
def mongo_client(mongo_service: Service) -> Iterator[MongoClient[dict[str, Any]]]:
    """A plain pymongo client for inspecting what the leader stored."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_service.url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_client(redis_service: Service) -> Iterator[redis.Redis]:
    """A plain Redis client for inspecting the Celery queues."""
    client = redis.Redis.from_url(redis_service.url)
    yield client
    client.close()


@pytest.fixture
def make_settings(mongo_service: Service, redis_service: Service) -> SettingsFactory:
    """Settings on a fresh database (one per test), fast scheduler ticks; keyword overrides win."""
    db_name = f"leader_{uuid.uuid4().hex[:12]}"

    def make(**overrides: Any) -> LeaderSettings:
        values: dict[str, Any] = {
            "mongo_uri": mongo_service.url,
            "redis_url": redis_service.url,
            "db_name": db_name,
            "admin_token": ADMIN_TOKEN,
            "follower_token": FOLLOWER_TOKEN,
            "place_interval_s": 0.2,
            "monitor_interval_s": 0.2,
            "grpc_port": 0,  # live progress off: no test here uses it (tests/e2e/test_progress.py does, on real processes)
            # The join token is trusted here (as on one host); test_follower_approval.py runs the leader's default.
            "follower_approval": "join-token",
        }
        values.update(overrides)
        return LeaderSettings(**values)

    return make


class Leader:
    """A running leader app and helpers that speak its API like a user or a follower would."""

    def __init__(self, client: TestClient, settings: LeaderSettings, db: Database[dict[str, Any]]) -> None:
        self.client, self.settings, self.db = client, settings, db
        self.credentials: dict[str, str] = {}  # follower id → the credential registration returned

    def stop(self) -> None:
        """Stop this leader now (as an operator stops the old release before starting the new one)."""
        _stop(self.client)
        self.client.__dict__["_stopped"] = True

    def as_follower(self, follower_id: str) -> dict[str, str]:
        """The follower's own credential header; the admin's for one this Leader did not register (admins may act for any)."""
        credential = self.credentials.get(follower_id)
        return {"Authorization": f"Bearer {credential}"} if credential else ADMIN

    def upload_model(self, name: str = "ident", version: str = "1", data: bytes | None = None) -> dict[str, Any]:
        response = self.client.post(
            "/api/v1/models",
            headers=ADMIN,
            data={"name": name, "version": version},
            files={"file": ("model.onnx", data if data is not None else identity_model(), "application/octet-stream")},
        )
        assert response.status_code == 201, response.text
        return response.json()

    def submit(self, model: str = "ident:1", text: str | None = None) -> dict[str, Any]:
        body = text if text is not None else SPEC_YAML.format(model=model)
        response = self.client.post("/api/v1/jobs", headers={**ADMIN, **YAML}, content=body)
        assert response.status_code == 201, response.text
        return response.json()

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.client.get(f"/api/v1/jobs/{job_id}", headers=ADMIN)
        assert response.status_code == 200, response.text
        return response.json()

    def register(self, follower_id: str, incarnation: str | None = None, backends: list[str] | None = None, *,
                 as_self: bool = False) -> dict[str, Any]:  # fmt: skip
        """Register with the join token, or (`as_self`) with the follower's own credential, as a restarted agent that
        kept it does."""
        info = follower_info(follower_id, incarnation or uuid.uuid4().hex, backends)
        headers = self.as_follower(follower_id) if as_self else FOLLOWER
        response = self.client.post("/api/v1/followers/register", headers=headers, json=info)
        assert response.status_code == 200, response.text
        if response.json()["credential"] is not None:
            self.credentials[follower_id] = response.json()["credential"]
        return response.json()

    def heartbeat(self, follower_id: str, incarnation: str, state: str = "ready") -> bool:
        body = {"incarnation": incarnation, "state": state}
        path = f"/api/v1/followers/{follower_id}/heartbeat"
        response = self.client.post(path, headers=self.as_follower(follower_id), json=body)
        assert response.status_code == 200, response.text
        return response.json()["known"]

    def wait_for(self, job_id: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        """Poll the job until predicate holds (the scheduler runs in the app's background)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if predicate(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} never matched; last seen {job['state']} attempt {job['attempt']}")
            time.sleep(0.05)

    def wait_state(self, job_id: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
        return self.wait_for(job_id, lambda job: job["state"] == state, timeout)

    def wait_dispatched(self, job_id: str, attempt: int = 1, timeout: float = 10.0) -> dict[str, Any]:
        """Until the attempt is assigned and its Celery message sent (the second of placement's two writes)."""

        def sent(job: dict[str, Any]) -> bool:
            stored = self.db.jobs.find_one({"_id": job_id}, {"dispatched": 1})
            return job["state"] == "assigned" and job["attempt"] == attempt and stored is not None and stored["dispatched"]

        return self.wait_for(job_id, sent, timeout)


def follower_info(follower_id: str, incarnation: str, backends: list[str] | None = None) -> dict[str, Any]:
    """A FollowerInfo body as an agent would send it (CPU-only: no GPUs, never faked)."""
    return {
        "follower_id": follower_id,
        "incarnation": incarnation,
        "host": "test-host",
        "cpu_model": "test cpu",
        "cpu_count": 4,
        "memory_mb": 8192,
        "gpus": [],
        "backends": backends if backends is not None else ["onnxruntime"],
        "version": __version__,
        "wire": WIRE,
    }


def point_result(index: int, follower_id: str, *, backend: str = "onnxruntime", batch: int = 1) -> dict[str, Any]:
    """A PointResult body for point `index`."""
    pct = {"count": 100, "mean": 1.0, "p50": 1.0, "p90": 1.5, "p95": 1.7, "p99": 2.0, "p999": 2.5, "max": 3.0}
    return {
        "point": {
            "index": index,
            "backend": backend,
            "batch_size": batch,
            "pattern": "poisson",
            "rate": 50.0,
            "duration_s": 2.0,
            "warmup_s": 0.5,
            "max_concurrency": 256,
            "seed": index,
        },
        "started_at": datetime.now(UTC).isoformat(),
        "measured_s": 2.0,
        "requests": 100,
        "ok": 100,
        "errors": 0,
        "offered_rate": 50.0,
        "achieved_rate": 49.8,
        "latency_ms": pct,
        "service_ms": pct,
        "send_lag_ms": pct,
        "cold_start": {"to_ready_s": 0.5, "to_first_answer_s": 0.6},
        "valid": True,
        "invalid_reasons": [],
        "slo_met": None,
        "environment": {
            "follower_id": follower_id,
            "host": "test-host",
            "cpu_model": "test cpu",
            "cpu_count": 4,
            "gpus": [],
            "python": "3.11",
            "benchfleet": "0.1.0",
            "backend_version": "1.0",
            "seed": index,
        },
    }


def queued_messages(redis_client: redis.Redis, follower_id: str) -> list[dict[str, Any]]:
    """Every Celery message waiting on the follower's queue (any priority sub-list), decoded to headers + args."""
    out = []
    base = queue_for(follower_id)
    for key in redis_client.keys(f"{base}*"):
        # kombu names priority sub-queues `<queue>\x06\x16<priority>`; nothing else may share the prefix.
        if key.decode() != base and not key.decode().startswith(base + "\x06\x16"):
            continue
        for raw in redis_client.lrange(key, 0, -1):
            message = json.loads(raw)
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            out.append({"task": message["headers"]["task"], "args": args, "key": key.decode()})
    return out


@pytest.fixture
def make_leader(make_settings: SettingsFactory, mongo_client: MongoClient[dict[str, Any]]) -> Iterator[Callable[..., Leader]]:
    """Start leader apps (lifespan on); all are stopped at the end of the test."""
    clients: list[TestClient] = []

    def start(**overrides: Any) -> Leader:
        settings = make_settings(**overrides)
        client = TestClient(create_app(settings), raise_server_exceptions=True)
        client.__enter__()
        clients.append(client)
        return Leader(client, settings, mongo_client[settings.db_name])

    yield start
    for client in reversed(clients):
        if not client.__dict__.get("_stopped"):
            _stop(client)


STOP_S = 30.0


def _stop(client: TestClient) -> None:
    """Stop one app (its lifespan's shutdown, then its event loop). A stop still running after STOP_S is reported as
    a warning and left to its daemon thread rather than failing the test it follows: twice in CI the loop's final
    cancel-all waited forever on a task it could not cancel (inside the async MongoDB client's teardown)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            client.__exit__(None, None, None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread below
            errors.append(exc)

    thread = threading.Thread(target=run, name="leader-app-stop", daemon=True)
    thread.start()
    thread.join(STOP_S)
    if thread.is_alive():
        warnings.warn(f"a leader app was still stopping after {STOP_S:.0f} s; left behind", RuntimeWarning, stacklevel=2)
    elif errors:
        raise errors[0]


@pytest.fixture
def leader(make_leader: Callable[..., Leader]) -> Leader:
    """One leader on a fresh database."""
    return make_leader()
