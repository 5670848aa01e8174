"""TLS on every channel benchfleet opens itself: the leader's API and its live-progress gRPC, checked by the follower
against the CA it is given (a self-signed certificate made here with openssl). A job runs end to end over them."""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pymongo
import pytest

from benchfleet.generate.modelgen import mlp_onnx
from benchfleet.stack import LocalStack

pytestmark = pytest.mark.e2e

JOB = """
name: tls
model: mlp-tls:1
backends: [onnxruntime]
batch_sizes: [1]
load: {allow_short: true, pattern: poisson, rate: 50, duration: 2s, warmup: 0.2s, window: 0.5s}
"""


def _certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "leader.pem", directory / "leader.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    return cert, key


def _until(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if value := predicate():
                return value
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def tls_stack(mongo_service, redis_service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Path]]:  # type: ignore[no-untyped-def]
    workdir = tmp_path_factory.mktemp("tls")
    cert, key = _certificate(workdir)
    env = {
        "BENCHFLEET_LEADER_TLS_CERTFILE": str(cert), "BENCHFLEET_LEADER_TLS_KEYFILE": str(key),
        "BENCHFLEET_FOLLOWER_LEADER_CA_FILE": str(cert),
        "BENCHFLEET_FOLLOWER_HEARTBEAT_INTERVAL_S": "0.5", "BENCHFLEET_FOLLOWER_METRICS_PORT": "-1",
    }  # fmt: skip
    stack = LocalStack(workdir, mongo_uri=mongo_service.url, redis_url=redis_service.url, db_name=f"tls_{uuid.uuid4().hex[:8]}",
                       base_env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, env=env)  # fmt: skip
    stack.url = stack.url.replace("http://", "https://")
    stack.env["BENCHFLEET_FOLLOWER_LEADER_URL"] = stack.url
    with stack:
        stack.start_leader(wait=False)
        trust = ssl.create_default_context(cafile=str(cert))
        _until(lambda: httpx.get(f"{stack.url}/healthz", verify=trust).status_code == 200, 60, "the leader over https")
        yield stack, cert


def test_a_job_runs_end_to_end_over_tls_and_plaintext_is_refused(tls_stack: tuple[LocalStack, Path]) -> None:
    stack, cert = tls_stack
    api = httpx.Client(base_url=stack.url, verify=ssl.create_default_context(cafile=str(cert)),
                       headers={"Authorization": f"Bearer {stack.admin_token}"}, timeout=30)  # fmt: skip
    with api:
        stack.start_follower("f-tls", wait=False)
        _until(lambda: any(f["info"]["follower_id"] == "f-tls" and f["state"] == "ready"
                           for f in api.get("/api/v1/followers").json()), 90, "the follower to register over https")  # fmt: skip
        upload = api.post("/api/v1/models", data={"name": "mlp-tls", "version": "1"}, files={"file": ("m.onnx", mlp_onnx())})
        assert upload.status_code == 201, upload.text
        job = api.post("/api/v1/jobs", content=JOB, headers={"Content-Type": "application/yaml"}).json()
        done = _until(lambda: (j := api.get(f"/api/v1/jobs/{job['id']}").json())["state"] in ("succeeded", "failed") and j,
                      120, "the job to end")  # fmt: skip
        assert done["state"] == "succeeded", done.get("error")
        # Its live progress came over the TLS gRPC channel (the only way windows reach the progress collection).
        with pymongo.MongoClient(stack.mongo_uri) as mongo:
            progress = mongo[str(stack.env["BENCHFLEET_LEADER_DB_NAME"])]["progress"].find_one({"_id": job["id"]})
        assert progress is not None and progress.get("points"), progress
    # Plaintext is not served, and an unknown CA is not trusted.
    with pytest.raises(httpx.HTTPError):
        httpx.get(stack.url.replace("https://", "http://") + "/healthz", timeout=5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{stack.url}/healthz", timeout=5)  # the system's CAs do not know this self-signed certificate
