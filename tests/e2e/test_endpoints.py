"""Endpoint targets through the whole system (#19): a job drives an endpoint benchfleet did not start — the ORT server
started by hand behind a gateway that wants an API key, a Triton started outside benchfleet over HTTP and gRPC, and
TF Serving's gRPC API (a stand-in: no tensorflow_model_server can be installed here) behind a key — with the key
stored as a target secret that no answer, export or log line ever holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchfleet.client import BenchfleetClient
from benchfleet.generate.modelgen import mlp_onnx
from common.wire.jobs import TERMINAL_STATES, JobState, JobView
from common.wire.models import ModelMeta, TensorSpec
from tests.e2e.endpoint_servers import GatedEndpoint, gated_ort, tfserving_grpc, tfserving_rest
from tests.e2e.test_walking_skeleton import _wait_done, _wait_until
from tests.verdicts import unexplained

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
LOAD = "{pattern: poisson, rate: 200, duration: 2.5s, warmup: 0.5s}"


@pytest.fixture(scope="module")
def follower(fleet) -> str:  # type: ignore[no-untyped-def]
    fleet.start_follower("f-endpoint")
    return "f-endpoint"


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatedEndpoint]:
    """benchfleet's ORT server started by hand, behind a gateway that refuses requests without X-Api-Key."""
    with gated_ort(tmp_path_factory.mktemp("gated-ort"), "mlp-gated") as endpoint:
        yield endpoint


def test_a_job_drives_a_hand_started_server_with_a_secret_that_never_comes_back(fleet, follower: str, gated) -> None:  # type: ignore[no-untyped-def]
    url, key = gated.url, gated.key
    with fleet.client() as client:
        stored = client.put_secret("ort-key", key, header="X-Api-Key")
        assert stored.name == "ort-key" and stored.header == "X-Api-Key"
        listed = client.secrets()
        before = gated.counts()
        job = client.submit_yaml(f"""
name: gated-endpoint
model: mlp-gated
load: {LOAD}
target: {{url: "{url}", protocol: kserve-http, secret: ort-key}}
""")
        results = _wait_done(client, job.id, timeout_s=120)
        (point,) = results.points
        after = gated.counts()
        # Everything a user or an operator can read afterwards.
        readable = [
            repr(stored), repr(listed), client.job(job.id).model_dump_json(), results.model_dump_json(),
            *(client.export(job.id, fmt).decode("latin-1") for fmt in ("csv", "json")), client.report(job.id).decode(),
            httpx.get(f"{fleet.url}/api/v1/audit", headers={"Authorization": f"Bearer {fleet.admin_token}"}).text,
        ]
        # Not the follower running it (it is not running it any more), not a user: nobody else opens the secret.
        refused = httpx.get(f"{fleet.url}/api/v1/jobs/{job.id}/target-credentials",
                            params={"attempt": 1, "follower_id": follower},
                            headers={"Authorization": f"Bearer {fleet.admin_token}"})  # fmt: skip
    assert point.point.backend == "endpoint"
    assert not unexplained(point), point.invalid_reasons
    assert point.errors == 0 and point.ok == point.requests > 0, point.error_sample
    assert point.cold_start is None  # benchfleet started nothing: no cold start is claimed
    assert point.latency_ms is not None and point.latency_ms.p50 > 0
    # Every request (the first answer and the metadata included) carried the key; none was refused.
    assert after["refused"] == before["refused"]
    assert after["authorized"] - before["authorized"] >= point.requests
    assert refused.status_code == 403, refused.text
    # The follower calibrated its generator against the target and tells the leader what a request costs it there.
    with fleet.client() as client:
        costs = _wait_until(lambda: next(f for f in client.followers() if f.info.follower_id == follower).target_costs_us
                            or None, 30, "the follower to advertise its generator cost against the target")  # fmt: skip
    assert costs[f"kserve-http {url}"] > 0
    logs = [p.read_text(errors="replace") for p in fleet.workdir.rglob("*.log")]
    assert logs, "the fleet's logs were read"
    for text in readable + logs:
        assert key not in text


def test_a_job_without_the_secret_is_refused_by_the_gateway_and_says_so(fleet, follower: str, gated) -> None:  # type: ignore[no-untyped-def]
    url = gated.url
    with fleet.client() as client:
        job = client.submit_yaml(f"""
name: ungated-endpoint
model: mlp-gated
inputs: [{{name: input, datatype: FP32, shape: [-1, 16]}}]
load: {LOAD}
target: {{url: "{url}", protocol: kserve-http}}
""")
    # The metadata read is refused first: the attempt fails naming the endpoint's answer, nothing is measured.
    ended = _wait_until(lambda: (j := _job(fleet, job.id)).state in TERMINAL_STATES and j, 120, "the job to end")
    assert ended.state == JobState.failed, ended
    assert "HTTP 401" in (ended.error or ""), ended.error


@pytest.fixture(scope="module")
def tfserving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatedEndpoint]:
    with tfserving_grpc(tmp_path_factory.mktemp("tfserving"), "mlp-tfs", version=3) as endpoint:
        yield endpoint


def test_a_job_drives_tf_servings_grpc_api_reading_the_signature_from_it(fleet, follower: str, tfserving) -> None:  # type: ignore[no-untyped-def]
    """No `inputs`: the signature comes from GetModelMetadata (serving_default); readiness from GetModelStatus; every
    Predict names the model, version 3 and serving_default, carries the key, and has tensors of the right dtype and
    size, or the stand-in would have answered INVALID_ARGUMENT (an error in the point)."""
    with fleet.client() as client:
        client.put_secret("tfs-key", tfserving.key, header="X-Api-Key")
        results = _run(client, f"""
name: tfserving-grpc
model: mlp-tfs
batch_sizes: [1, 4]
load: {LOAD}
target: {{url: "{tfserving.url}", protocol: tfserving-grpc, model_version: "3", secret: tfs-key}}
""")
        ungated = client.submit_yaml(f"""
name: tfserving-grpc-no-key
model: mlp-tfs
load: {LOAD}
target: {{url: "{tfserving.url}", protocol: tfserving-grpc}}
""")
    assert [p.point.batch_size for p in results.points] == [1, 4]
    for point in results.points:
        assert not unexplained(point), point.invalid_reasons
        assert point.errors == 0 and point.ok == point.requests > 0, point.error_sample
        assert point.cold_start is None and point.environment.backend_version.startswith("tfserving-grpc")
    ended = _wait_until(lambda: (j := _job(fleet, ungated.id)).state in TERMINAL_STATES and j, 120, "the job to end")
    assert ended.state == JobState.failed and "UNAUTHENTICATED (check target.secret)" in (ended.error or ""), ended.error


@pytest.fixture(scope="module")
def tfserving_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatedEndpoint]:
    with tfserving_rest(tmp_path_factory.mktemp("tfserving-rest"), "mlp-tfr", version=3, label="stable") as endpoint:
        yield endpoint


def test_the_rest_stand_in_answers_as_tf_servings_published_api(tfserving_http: GatedEndpoint) -> None:
    """What the job below is checked against: the status, the metadata, both request formats and their answers, and
    TF Serving's error codes and bodies."""
    key = {"X-Api-Key": tfserving_http.key}
    base = f"{tfserving_http.url}/v1/models/{tfserving_http.model}"
    with httpx.Client(headers=key, timeout=10) as http:
        (status,) = http.get(base).json()["model_version_status"]
        assert status == {"version": "3", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        signature = http.get(f"{base}/versions/3/metadata").json()["metadata"]["signature_def"]["signature_def"]
        dims = signature["serving_default"]["inputs"]["input"]["tensor_shape"]["dim"]
        assert [d["size"] for d in dims] == ["-1", "12"]  # int64 sizes as strings, as TF Serving writes them
        rows = [[0.5] * 12, [-1.0] * 12]
        by_row = http.post(f"{base}/labels/stable:predict", json={"instances": rows})
        by_column = http.post(f"{base}:predict", json={"signature_name": "serving_default", "inputs": {"input": rows}})
        assert by_row.status_code == by_column.status_code == 200
        assert by_row.json()["predictions"] == by_column.json()["outputs"] and len(by_row.json()["predictions"]) == 2
        refusals = [
            (http.post(f"{base}/versions/9:predict", json={"inputs": rows}), 404, "Specific(mlp-tfr, 9)"),
            (http.post(f"{base}/labels/canary:predict", json={"inputs": rows}), 400, "version label: canary"),
            (http.post(f"{base}:predict", json={"inputs": rows, "instances": rows}), 400, "both"),
            (http.post(f"{base}:predict", json={"signature_name": "classify", "inputs": rows}), 400, '"classify" not found'),
            (http.post(f"{base}:predict", json={"inputs": [[0.5] * 11]}), 400, "does not match"),
            (http.post(f"{tfserving_http.url}/v1/models/other:predict", json={"inputs": rows}), 404, "Latest(other)"),
            (httpx.post(f"{base}:predict", json={"inputs": rows}), 401, "API key"),
        ]
    for answer, code, words in refusals:
        assert answer.status_code == code and words in answer.json()["error"], (code, answer.text)


def test_a_job_drives_tf_servings_rest_api_by_its_version_label(fleet, follower: str, tfserving_http) -> None:  # type: ignore[no-untyped-def]
    """No `inputs`: the signature from the metadata, readiness from the model's status (a version AVAILABLE), requests
    in the columnar format to the label's URL with the key; the strict stand-in would have refused anything else."""
    before = httpx.get(f"{tfserving_http.url}/counts").json()
    with fleet.client() as client:
        client.put_secret("tfr-key", tfserving_http.key, header="X-Api-Key")
        results = _run(client, f"""
name: tfserving-rest
model: mlp-tfr
batch_sizes: [1, 4]
load: {LOAD}
target: {{url: "{tfserving_http.url}", protocol: tfserving-rest, model_version: stable, secret: tfr-key}}
""")
    after = httpx.get(f"{tfserving_http.url}/counts").json()
    assert [p.point.batch_size for p in results.points] == [1, 4]
    for point in results.points:
        assert not unexplained(point), point.invalid_reasons
        assert point.errors == 0 and point.ok == point.requests > 0, point.error_sample
        assert point.environment.backend_version.startswith("tfserving-rest")
    sent = sum(p.requests for p in results.points)
    assert after.get("columnar", 0) - before.get("columnar", 0) >= sent
    assert after.get("status", 0) > before.get("status", 0) and after.get("metadata", 0) > before.get("metadata", 0)
    refused = [{k: v for k, v in counts.items() if k.startswith("refused")} for counts in (before, after)]
    assert refused[0] == refused[1], refused  # nothing the job sent was refused


def _job(fleet, job_id: str) -> JobView:  # type: ignore[no-untyped-def]
    with fleet.client() as client:
        return client.job(job_id)


def test_submission_refuses_a_missing_secret_and_credentials_in_the_url(fleet, follower: str) -> None:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {fleet.admin_token}", "Content-Type": "application/yaml"}
    cases = (('{url: "http://127.0.0.1:1", protocol: kserve-http, secret: nope}', "target.secret"),
             ('{url: "http://u:p@127.0.0.1:1", protocol: kserve-http}', "target.url"))
    for target, field in cases:
        body = (f"name: bad-target\nmodel: m\ninputs: [{{name: x, datatype: FP32, shape: [-1, 2]}}]\n"
                f"load: {LOAD}\ntarget: {target}\n")
        answer = httpx.post(f"{fleet.url}/api/v1/jobs", content=body, headers=headers)
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"].startswith(field), answer.json()
        assert "u:p" not in answer.text


@pytest.fixture(scope="module")
def outside_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real Triton started by the test, not by any follower: (its HTTP base URL, its gRPC port)."""
    from common.spec.server import ServerOptions
    from follower.backends.triton import TritonBackend, find_triton, why_no_triton

    if find_triton() is None:
        pytest.skip(f"Triton is not installed here: {why_no_triton()}")
    work = tmp_path_factory.mktemp("outside-triton")
    model = work / "model.onnx"
    model.write_bytes(mlp_onnx(inputs=8, hidden=16, outputs=2, seed=5))
    meta = ModelMeta(name="outside", version="1", format="onnx",
                     inputs=[TensorSpec(name="input", datatype="FP32", shape=[-1, 8])],
                     outputs=[TensorSpec(name="output", datatype="FP32", shape=[-1, 2])], sha256="0" * 64,
                     size_bytes=model.stat().st_size, created_at="2026-01-01T00:00:00Z")  # type: ignore[arg-type]  # fmt: skip
    triton = TritonBackend(cpus=None, server=ServerOptions(), sandbox=None)
    try:
        triton.start(model, meta, work)
        triton.wait_ready(120)
        assert triton.grpc_port is not None
        yield triton.endpoint, triton.grpc_port
    finally:
        triton.stop()


@pytest.mark.parametrize("protocol", ["kserve-http", "kserve-grpc"])
def test_a_job_drives_a_triton_started_outside_benchfleet(fleet, follower: str, outside_triton, protocol: str) -> None:  # type: ignore[no-untyped-def]
    http_url, grpc_port = outside_triton
    url = http_url if protocol == "kserve-http" else f"grpc://127.0.0.1:{grpc_port}"
    # gRPC reads the signature with ModelMetadata; HTTP with GET /v2/models/outside: neither needs `inputs`.
    with fleet.client() as client:
        results = _run(client, f"""
name: outside-triton-{protocol}
model: outside
load: {LOAD}
target: {{url: "{url}", protocol: {protocol}}}
""")
    (point,) = results.points
    assert not unexplained(point), point.invalid_reasons
    assert point.errors == 0 and point.ok == point.requests > 0, point.error_sample
    assert point.cold_start is None
    assert point.environment.backend_version.startswith(protocol)


def _run(client: BenchfleetClient, yaml: str):  # type: ignore[no-untyped-def]
    return _wait_done(client, client.submit_yaml(yaml).id, timeout_s=120)
