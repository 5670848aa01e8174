"""KServe v2 gRPC end to end on real servers: our ORT server's gRPC door, the generator's grpc.aio path, Triton's port."""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import pytest

from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.grid import expand
from common.spec.parse import parse_spec
from common.wire.models import ModelMeta, TensorSpec
from follower.loadgen.bodies import build_bodies
from follower.loadgen.openloop import drive
from follower.point.context import ServerRun
from follower.point.runner import run_backend
from follower.protocols import PROTOCOLS, Endpoint
from protos import grpc_predict_v2_pb2 as pb
from protos import kserve_v2
from tests.integration.follower.conftest import ROOT

pytestmark = pytest.mark.integration
KSERVE_GRPC = PROTOCOLS["kserve-grpc"]


@pytest.fixture(scope="module")
def grpc_server(mlp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Our ORT server with its gRPC door open; yields host:port of the gRPC side."""
    port, gport = free_port(), free_port()
    argv = [sys.executable, "-m", "follower.servers.ort_server", "--model", str(mlp_path), "--name", "mlp",
            "--port", str(port), "--grpc-port", str(gport)]  # fmt: skip
    log = tmp_path_factory.mktemp("ortg") / "ort.log"
    with SupervisedProcess(argv, name="ort grpc server", log_path=log, cwd=ROOT) as proc:
        proc.wait_ready(http_ready(f"http://127.0.0.1:{port}/v2/health/ready"), timeout_s=30)
        yield f"127.0.0.1:{gport}"


def _stub(address: str) -> tuple[grpc.Channel, kserve_v2.Stub]:
    channel = grpc.insecure_channel(address)
    return channel, kserve_v2.Stub(channel)


def test_grpc_infer_matches_onnxruntime_in_process(grpc_server: str, mlp_path: Path, mlp_meta: ModelMeta) -> None:
    channel, stub = _stub(grpc_server)
    with channel:
        assert stub.ServerLive(pb.ServerLiveRequest()).live
        assert stub.ModelReady(pb.ModelReadyRequest(name="mlp")).ready
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"))
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("input", "FP32", [-1, 64])]
        body = build_bodies(mlp_meta.inputs, 3, seed=4, variants=1, protocol="kserve-grpc")[0]
        request = pb.ModelInferRequest.FromString(KSERVE_GRPC.prefix(Endpoint("kserve-grpc", "grpc://h:1", "mlp")) + body)
        assert request.model_name == "mlp" and list(request.inputs[0].shape) == [3, 64]
        response = stub.ModelInfer(request)
    x = np.frombuffer(request.raw_input_contents[0], dtype="<f4").reshape(3, 64)
    got = np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(list(response.outputs[0].shape))
    want = ort.InferenceSession(str(mlp_path)).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert {"queue_ns", "infer_ns", "decode_ns", "encode_ns"} <= set(response.parameters)


def test_a_standard_kserve_client_calls_our_server(grpc_server: str, mlp_path: Path) -> None:
    """tritonclient.grpc (Triton's own KServe v2 client) talks to our server, imported beside our stubs."""
    import tritonclient.grpc as triton_grpc

    from protos import grpc_predict_v2_pb2  # noqa: F401 - both descriptor sets in one process: no duplicate symbol

    client = triton_grpc.InferenceServerClient(grpc_server)
    try:
        assert client.is_server_live() and client.is_model_ready("mlp")
        meta = client.get_model_metadata("mlp", as_json=True)
        assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": ["-1", "64"]}]
        x = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)
        tensor = triton_grpc.InferInput("input", [2, 64], "FP32")
        tensor.set_data_from_numpy(x)
        answer = client.infer("mlp", [tensor])
        want = ort.InferenceSession(str(mlp_path)).run(None, {"input": x})[0]
        np.testing.assert_allclose(answer.as_numpy("output"), want, rtol=1e-5, atol=1e-6)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda r: setattr(r.inputs[0], "name", "nope"), "unknown input 'nope'"),
        (lambda r: setattr(r.inputs[0], "datatype", "INT64"), "datatype 'INT64'"),
        (lambda r: r.raw_input_contents.__setitem__(0, b"\0" * 7), "raw bytes do not fill"),
        (lambda r: r.inputs[0].shape.__setitem__(1, 65), "does not fit"),
    ],
)
def test_bad_grpc_requests_are_invalid_argument_naming_the_input(  # type: ignore[no-untyped-def]
    grpc_server: str, mlp_meta: ModelMeta, mutate, needle: str
) -> None:
    body = build_bodies(mlp_meta.inputs, 1, seed=0, variants=1, protocol="kserve-grpc")[0]
    request = pb.ModelInferRequest.FromString(KSERVE_GRPC.prefix(Endpoint("kserve-grpc", "grpc://h:1", "mlp")) + body)
    mutate(request)
    channel, stub = _stub(grpc_server)
    with channel, pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in info.value.details()


def test_open_loop_over_grpc_records_four_timestamps_and_stages(grpc_server: str, mlp_meta: ModelMeta) -> None:
    bodies = build_bodies(mlp_meta.inputs, 1, seed=1, variants=4, protocol="kserve-grpc")
    offsets = (np.arange(60) * 10_000_000).astype(np.int64)  # 100 req/s for 0.6 s
    rec = drive(Endpoint("kserve-grpc", f"grpc://{grpc_server}", "mlp"), bodies, offsets)
    assert (rec.status == 200).all(), rec.error_sample
    assert (rec.sent_ns >= rec.intended_ns).all()
    # Unary gRPC: the answer arrives whole, so first byte and done are both "response received".
    assert (rec.first_byte_ns >= rec.sent_ns).all() and (rec.done_ns >= rec.first_byte_ns).all()
    assert (rec.stages_ns["infer_ns"] > 0).all()


def test_unknown_model_over_grpc_is_an_error_status_in_the_records(grpc_server: str, mlp_meta: ModelMeta) -> None:
    bodies = build_bodies(mlp_meta.inputs, 1, seed=1, variants=1, protocol="kserve-grpc")
    rec = drive(Endpoint("kserve-grpc", f"grpc://{grpc_server}", "nosuch"), bodies, np.zeros(2, dtype=np.int64))
    assert (rec.status == 404).all() and "NOT_FOUND" in (rec.error_sample or "")


def _canon(tmp_path: Path) -> tuple[Path, ModelMeta]:
    pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")
    from follower.convert.canonical import CanonicalSpec, generate

    bundle, meta = generate(CanonicalSpec("fc", depth=1, width=16, input_size=8))
    path = tmp_path / "canon.zip"
    path.write_bytes(bundle)
    model = ModelMeta(
        name="canon", version="1", format="bundle", inputs=[TensorSpec(**t) for t in meta["inputs"]],
        outputs=[TensorSpec(**t) for t in meta["outputs"]], sha256=hashlib.sha256(bundle).hexdigest(),
        size_bytes=len(bundle), created_at=datetime.now(UTC),
    )  # fmt: skip
    return path, model


def _available(backend: str) -> str | None:
    from follower.backends import BACKENDS

    ok, why = BACKENDS[backend].available()
    return None if ok else why


@pytest.mark.parametrize("backend", ["onnxruntime", "torchscript", "triton"])
def test_protocol_grpc_is_honoured_by_the_runner(backend: str, tmp_path: Path) -> None:
    if reason := _available(backend):
        pytest.skip(reason)
    path, model = _canon(tmp_path)
    spec = parse_spec({"name": "g", "model": "canon:1", "backends": [backend], "server": {"protocol": "grpc"},
                       "load": {"rate": 50, "duration": 0.6, "warmup": 0.2}})  # fmt: skip

    async def collect() -> list:
        run = ServerRun(model=model, model_path=path, workdir=tmp_path / "w")
        return [r async for r in run_backend(backend, expand(spec), run)]

    started = time.monotonic()
    (result,) = asyncio.run(collect())
    assert result.errors == 0 and result.ok == result.requests > 0, result.error_sample
    assert result.latency_ms is not None and result.latency_ms.p50 > 0
    # The server counted what the generator sent: the load really went over gRPC to this server.
    assert result.server_stats is not None and result.server_stats.inferences >= result.ok
    if backend != "triton":
        # Our servers' stage timings travel back in the gRPC response parameters, as over HTTP.
        assert result.stages_ms is not None and result.stages_ms["infer"] > 0, result.stages_ms
    assert time.monotonic() - started < 120
