"""benchfleet's ORT server as a real process: KServe v2 metadata, readiness, numerically exact inference, errors."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from tests.integration.follower.conftest import OrtServer, serve_ort

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


@pytest.mark.parametrize("precision", ["int8_dynamic", "int8_static", "float16"])
def test_the_server_serves_the_model_in_the_precision_asked(precision: str, tmp_path: Path) -> None:
    """`--precision` converts the model as the server loads it: its answers are the converted model's (as
    follower.servers.ort_server.converted makes it, run in-process; static INT8 calibrated on the same samples), close
    to the float32 model's but not equal to them; the class each row ranks first is the same on these digits."""
    from benchfleet.generate.digits import digits, digits_mlp
    from follower.servers.ort_server import converted

    model, _ = digits_mlp()
    path = tmp_path / "digits.onnx"
    path.write_bytes(model)
    x = digits().test_x[:16]
    calibration = tmp_path / "calibration.npz"
    np.savez(calibration, input=digits().train_x[:64].astype(np.float32))
    extra = ["--calibration", str(calibration)] if precision == "int8_static" else []
    with serve_ort(path, "digits", tmp_path, "--precision", precision, *extra) as server:
        body = {"inputs": [{"name": "input", "shape": [16, 64], "datatype": "FP32", "data": x.ravel().tolist()}]}
        response = httpx.post(f"{server.url}/v2/models/digits/infer", json=body)
    assert response.status_code == 200, response.text
    (out,) = response.json()["outputs"]
    assert out["datatype"] == "FP32"  # inputs and outputs stay float32 whatever the precision inside
    served = np.asarray(out["data"], dtype=np.float32).reshape(16, 10)
    expected = ort.InferenceSession(converted(str(path), precision, str(calibration))).run(None, {"input": x})[0]
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    full = ort.InferenceSession(model).run(None, {"input": x})[0]
    assert 1e-4 < float(np.abs(served - full).max()) < 0.5 * float(np.abs(full).max())
    assert np.array_equal(served.argmax(axis=1), full.argmax(axis=1))


def test_a_session_of_one_off_calls_keeps_one_client(ort_server: OrtServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A quality pass's thousands of answers go over one client (its connection kept open); calls outside a session
    each open their own, as before."""
    from follower.protocols import NO_CREDENTIALS, PROTOCOLS, Credentials, Endpoint, calls, session

    made: list[Credentials] = []
    real = calls._client

    def counted(credentials: Credentials) -> httpx.Client:
        made.append(credentials)
        return real(credentials)

    monkeypatch.setattr(calls, "_client", counted)
    endpoint = Endpoint(base=ort_server.url, model="mlp", protocol="kserve-http")
    body = PROTOCOLS["kserve-http"].encode([{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}])
    with session(NO_CREDENTIALS):
        answers = [PROTOCOLS["kserve-http"].outputs(endpoint, body, NO_CREDENTIALS)["output"] for _ in range(3)]
    assert len(made) == 1 and all(a.shape == (1, 10) for a in answers)
    PROTOCOLS["kserve-http"].outputs(endpoint, body, NO_CREDENTIALS)
    PROTOCOLS["kserve-http"].outputs(endpoint, body, NO_CREDENTIALS)
    assert len(made) == 3
