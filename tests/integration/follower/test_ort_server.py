"""benchfleet's ORT server as a real process: KServe v2 metadata, readiness, numerically exact inference, errors."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from tests.integration.follower.conftest import OrtServer

pytestmark = pytest.mark.integration


def test_health_and_server_metadata(ort_server: OrtServer) -> None:
    assert httpx.get(f"{ort_server.url}/v2/health/live").status_code == 200
    assert httpx.get(f"{ort_server.url}/v2/health/ready").json() == {"ready": True}
    assert httpx.get(f"{ort_server.url}/v2/models/mlp/ready").status_code == 200
    meta = httpx.get(f"{ort_server.url}/v2").json()
    assert meta["version"] == ort.__version__


def test_model_metadata(ort_server: OrtServer) -> None:
    meta = httpx.get(f"{ort_server.url}/v2/models/mlp").json()
    assert meta["name"] == "mlp"
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert meta["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]


def test_infer_matches_onnxruntime_in_process(ort_server: OrtServer, mlp_path: Path) -> None:
    x = np.random.default_rng(42).standard_normal((3, 64)).astype(np.float32)
    body = {"id": "req-1", "inputs": [{"name": "input", "shape": [3, 64], "datatype": "FP32", "data": x.ravel().tolist()}]}
    response = httpx.post(f"{ort_server.url}/v2/models/mlp/infer", json=body)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["model_name"] == "mlp"
    assert doc["id"] == "req-1"
    (out,) = doc["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("output", "FP32", [3, 10])
    expected = ort.InferenceSession(str(mlp_path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    # float32 survives JSON exactly (shortest round-trip repr); the server's ORT may use other kernels/threads, so
    # allow only float32 rounding differences.
    np.testing.assert_allclose(np.asarray(out["data"], dtype=np.float32).reshape(3, 10), expected, rtol=1e-5, atol=1e-6)
    params = doc["parameters"]
    assert set(params) == {"queue_ns", "infer_ns", "decode_ns", "encode_ns"}
    assert all(isinstance(v, int) and v >= 0 for v in params.values())
    assert params["infer_ns"] > 0


def test_requested_outputs_and_unknown_output(ort_server: OrtServer) -> None:
    base = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}]}
    ok = httpx.post(f"{ort_server.url}/v2/models/mlp/infer", json={**base, "outputs": [{"name": "output"}]})
    assert [o["name"] for o in ok.json()["outputs"]] == ["output"]
    bad = httpx.post(f"{ort_server.url}/v2/models/mlp/infer", json={**base, "outputs": [{"name": "logits"}]})
    assert bad.status_code == 400
    assert "logits" in bad.json()["error"]


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}, "'x'"),
        ({"name": "input", "shape": [1, 64], "datatype": "INT64", "data": [0] * 64}, "'input'"),
        ({"name": "input", "shape": [1, 63], "datatype": "FP32", "data": [0.0] * 63}, "'input'"),
        ({"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 10}, "'input'"),
        ({"name": "input", "shape": [1, 64], "datatype": "FP32", "data": ["a"] * 64}, "'input'"),
    ],
)
def test_bad_requests_are_400_naming_the_input(ort_server: OrtServer, entry: dict[str, object], needle: str) -> None:
    response = httpx.post(f"{ort_server.url}/v2/models/mlp/infer", json={"inputs": [entry]})
    assert response.status_code == 400
    assert needle in response.json()["error"]


def test_malformed_body_is_400(ort_server: OrtServer) -> None:
    response = httpx.post(f"{ort_server.url}/v2/models/mlp/infer", content=b"{not json")
    assert response.status_code == 400
    assert "error" in response.json()


def test_unknown_model_is_404(ort_server: OrtServer) -> None:
    assert httpx.get(f"{ort_server.url}/v2/models/resnet").status_code == 404
    assert httpx.get(f"{ort_server.url}/v2/models/resnet/ready").status_code == 404
    response = httpx.post(f"{ort_server.url}/v2/models/resnet/infer", json={"inputs": []})
    assert response.status_code == 404
    assert "resnet" in response.json()["error"]
