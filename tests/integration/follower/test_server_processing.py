"""Server-side processing on our own model servers: the client sends encoded images, the server runs the registered
preprocessor (and top-k postprocessor); the answer's top-1 equals the in-process reference, and the measured point
reports the server's pre-processing stage, while a client-side run reports client pre-processing instead."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.job import DataRef, PointSpec
from common.spec.server import ServerOptions
from common.wire.models import ModelMeta, TensorSpec
from follower.attempt.request_data import resolve_request_data, with_client_stages
from follower.point.context import HostFacts, ServerRun
from follower.point.runner import run_backend
from tests.integration.follower.conftest import serve_ort

pytestmark = pytest.mark.integration
skimage = pytest.importorskip("skimage", reason="scikit-image (images extra) ships the sample images")

ROOT = Path(__file__).resolve().parents[3]
SIDE = 32
HOST = HostFacts(follower_id="f-test", host="testhost", cpu_model="test cpu", cpu_count=os.cpu_count() or 1)


def image_classifier() -> bytes:
    """A tiny N×3×32×32 → N×10 classifier (global average pool, dense): its top-1 differs between the samples."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    # Seed 10 gives the five shipped sample images four different classes.
    dense = numpy_helper.from_array(np.random.default_rng(10).standard_normal((3, 10)).astype(np.float32), "dense_w")
    nodes = [
        helper.make_node("GlobalAveragePool", ["image"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "dense_w"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "imgcls",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=[dense],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelMeta]:
    path = tmp_path_factory.mktemp("imgcls") / "imgcls.onnx"
    path.write_bytes(image_classifier())
    meta = ModelMeta(
        name="imgcls", version="1", format="onnx",
        inputs=[TensorSpec(name="image", datatype="FP32", shape=[-1, 3, SIDE, SIDE])],
        outputs=[TensorSpec(name="logits", datatype="FP32", shape=[-1, 10])],
        sha256="0" * 64, size_bytes=path.stat().st_size, created_at=datetime.now(UTC),
    )  # fmt: skip
    return path, meta


GRPC_PORT: dict[str, int] = {}


@pytest.fixture(scope="module")
def processing_server(classifier: tuple[Path, ModelMeta], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Our ORT server with image_imagenet before and topk after inference, serving the classifier raw (HTTP + gRPC)."""
    path, _ = classifier
    GRPC_PORT["port"] = free_port()
    with serve_ort(path, "imgcls", tmp_path_factory.mktemp("ortproc"), "--grpc-port", str(GRPC_PORT["port"]),
                   "--preprocess", "image_imagenet", "--postprocess", "topk") as server:  # fmt: skip
        yield server.url


@pytest.fixture(scope="module")
def plain_server(classifier: tuple[Path, ModelMeta], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Our ORT server without processors: it takes the client-side preprocessed tensors."""
    path, _ = classifier
    with serve_ort(path, "imgcls", tmp_path_factory.mktemp("ortplain")) as server:
        yield server.url


def reference_top1(model_path: Path, images: list[bytes]) -> list[int]:
    """In-process: the same preprocessor, onnxruntime in this process, argmax."""
    from follower.servers.processing import image_to_tensor

    batch = np.stack([image_to_tensor(img, SIDE) for img in images])
    logits = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, {"image": batch})[0]
    return [int(i) for i in logits.argmax(axis=1)]


def test_server_side_processing_answers_the_in_process_top1(
    classifier: tuple[Path, ModelMeta], processing_server: str, plain_server: str
) -> None:
    from follower.servers.processing import raw_sample_images

    path, _ = classifier
    images = raw_sample_images()
    expected = reference_top1(path, images)
    assert len(set(expected)) > 1, "the reference should not give every image the same class"
    meta = httpx.get(f"{processing_server}/v2/models/imgcls").json()
    assert meta["inputs"] == [{"name": "image", "datatype": "BYTES", "shape": [-1, 1]}]
    assert meta["outputs"] == [{"name": "logits", "datatype": "BYTES", "shape": [-1, 1]}]
    data = [base64.b64encode(img).decode("ascii") for img in images]
    body = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [len(data), 1], "data": data}]}
    response = httpx.post(f"{processing_server}/v2/models/imgcls/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    doc = response.json()
    (out,) = doc["outputs"]
    assert (out["datatype"], out["shape"]) == ("BYTES", [len(images), 1])
    rows = [json.loads(text) for text in out["data"]]
    assert [row[0]["index"] for row in rows] == expected
    assert all(len(row) == 5 and row[0]["score"] >= row[1]["score"] for row in rows)
    params = doc["parameters"]
    assert params["preprocess_ns"] > 0 and params["postprocess_ns"] > 0 and params["infer_ns"] > 0

    # The client-side path gives the same classes: tensors preprocessed here, answered by our server without processors.
    samples, client_ms = resolve_request_data(DataRef(source="sample_images"), classifier[1], client=None, cache_dir=path.parent)
    assert samples is not None and client_ms is not None and client_ms["preprocess"] > 0
    batch = np.stack(samples["image"])
    body = {"inputs": [{"name": "image", "datatype": "FP32", "shape": list(batch.shape), "data": batch.ravel().tolist()}]}
    response = httpx.post(f"{plain_server}/v2/models/imgcls/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    (out,) = response.json()["outputs"]
    logits = np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
    assert [int(i) for i in logits.argmax(axis=1)] == expected
    assert "preprocess_ns" not in response.json()["parameters"]


def test_server_side_processing_over_grpc(classifier: tuple[Path, ModelMeta], processing_server: str) -> None:
    """The same over KServe v2 gRPC: length-prefixed raw BYTES in (the generator's own encoding), JSON BYTES out."""
    import grpc

    from follower.loadgen.bodies import build_bodies
    from follower.protocols import PROTOCOLS, Endpoint
    from follower.servers.processing import raw_sample_images
    from protos import grpc_predict_v2_pb2 as pb
    from protos import kserve_v2

    path, meta = classifier
    images = raw_sample_images()
    body = build_bodies(meta.inputs, 1, seed=0, variants=1, protocol="kserve-grpc", samples={"image": images[:1]})[0]
    request = pb.ModelInferRequest.FromString(
        PROTOCOLS["kserve-grpc"].prefix(Endpoint("kserve-grpc", "grpc://h:1", "imgcls")) + body
    )
    with grpc.insecure_channel(f"127.0.0.1:{GRPC_PORT['port']}") as channel:
        response = kserve_v2.Stub(channel).ModelInfer(request)
    (out,) = response.outputs
    assert (out.datatype, list(out.shape)) == ("BYTES", [1, 1])
    raw = response.raw_output_contents[0]
    assert int.from_bytes(raw[:4], "little") == len(raw) - 4
    assert json.loads(raw[4:])[0]["index"] == reference_top1(path, images[:1])[0]
    assert response.parameters["preprocess_ns"].int64_param > 0


def test_raw_input_errors_are_400_naming_the_input(processing_server: str) -> None:
    url = f"{processing_server}/v2/models/imgcls/infer"
    not_b64 = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1, 1], "data": ["%%%"]}]}
    response = httpx.post(url, json=not_b64)
    assert response.status_code == 400 and "'image'" in response.json()["error"] and "base64" in response.json()["error"]
    not_image = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1, 1], "data": [base64.b64encode(b"no").decode()]}]}
    response = httpx.post(url, json=not_image)
    assert response.status_code == 400 and "decodable image" in response.json()["error"]
    tensor = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1], "data": [0.5]}]}
    assert httpx.post(url, json=tensor).status_code == 400


def _point(processing: str) -> PointSpec:
    server = ServerOptions(preprocess="image_imagenet", postprocess="topk") if processing == "server" else ServerOptions()
    return PointSpec(
        index=0, backend="onnxruntime", batch_size=1, pattern="poisson", rate=40.0, duration_s=1.5, warmup_s=0.5,
        max_concurrency=16, seed=3, server=server,
    )  # fmt: skip


@pytest.mark.parametrize("processing", ["client", "server"])
def test_point_reports_where_preprocessing_ran(classifier: tuple[Path, ModelMeta], tmp_path: Path, processing: str) -> None:
    path, meta = classifier
    data = DataRef(source="sample_images", preprocess="image_imagenet", postprocess="topk", processing=processing)  # type: ignore[arg-type]
    samples, client_ms = resolve_request_data(data, meta, client=None, cache_dir=tmp_path)

    async def run() -> list:
        return [
            r
            async for r in run_backend(
                "onnxruntime",
                [_point(processing)],
                ServerRun(
                    model=meta,
                    model_path=path,
                    workdir=tmp_path,
                    host_facts=HOST,
                    slo=None,
                    samples=samples,
                    postprocess="topk" if processing == "client" else None,
                    labels=tuple(f"class {i}" for i in range(10)),
                ),
            )
        ]

    (result,) = asyncio.run(run())
    result = with_client_stages(result, client_ms)
    assert result.errors == 0, result.error_sample
    assert result.ok > 0 and result.stages_ms is not None
    stats = result.server_stats
    assert stats is not None
    if processing == "server":
        assert result.stages_ms["preprocess"] > 0 and result.stages_ms["postprocess"] > 0
        assert stats.preprocess_ms_mean is not None and stats.preprocess_ms_mean > 0
        assert result.client_stages_ms is None
    else:
        assert "preprocess" not in result.stages_ms and stats.preprocess_ms_mean is None
        assert result.client_stages_ms is not None and result.client_stages_ms["preprocess"] > 0
        # The top-k ran here on real answers, timed beside the pre-processing; the server ran neither.
        assert result.client_stages_ms["postprocess"] > 0 and stats.postprocess_ms_mean is None


def test_triton_python_model_runs_the_processors(classifier: tuple[Path, ModelMeta], tmp_path: Path) -> None:
    """Triton's python-backend model runs benchfleet's processors: tritonclient sends encoded images, reads top-k JSON
    whose top-1 matches the in-process reference, and the point reports the server pre-processing stage."""
    from follower.backends import get_backend
    from follower.backends.triton import find_triton, why_no_triton
    from follower.servers.processing import raw_sample_images

    if find_triton() is None:
        pytest.skip(why_no_triton())
    import tritonclient.http as triton_http

    path, meta = classifier
    images = raw_sample_images()
    point = _point("server").model_copy(update={"backend": "triton"})
    backend = get_backend("triton", server=point.server)
    try:
        backend.start(path, meta, tmp_path)
        backend.wait_ready(60)
        client = triton_http.InferenceServerClient(backend.endpoint.removeprefix("http://"))
        served = client.get_model_metadata("imgcls")
        assert [(t["name"], t["datatype"], t["shape"]) for t in served["inputs"]] == [("image", "BYTES", [-1, 1])]
        raw = triton_http.InferInput("image", [len(images), 1], "BYTES")
        raw.set_data_from_numpy(np.asarray([[base64.b64encode(img)] for img in images], dtype=np.object_), binary_data=False)
        answer = client.infer("imgcls", [raw], outputs=[triton_http.InferRequestedOutput("logits", binary_data=False)])
        rows = [json.loads(text) for text in answer.as_numpy("logits").ravel()]
        assert [row[0]["index"] for row in rows] == reference_top1(path, images)
        client.close()
        # The same check through tritonclient.grpc on Triton's gRPC port (binary BYTES: base64 text, as over HTTP).
        import tritonclient.grpc as triton_grpc

        assert backend.grpc_port is not None
        grpc_client = triton_grpc.InferenceServerClient(f"{backend.host}:{backend.grpc_port}")
        raw_grpc = triton_grpc.InferInput("image", [len(images), 1], "BYTES")
        raw_grpc.set_data_from_numpy(np.asarray([[base64.b64encode(img)] for img in images], dtype=np.object_))
        over_grpc = grpc_client.infer("imgcls", [raw_grpc]).as_numpy("logits").ravel()
        assert [json.loads(text)[0]["index"] for text in over_grpc] == reference_top1(path, images)
        grpc_client.close()
        # The backend's control plane goes through tritonclient.http too: config, metadata, statistics, version.
        config = backend.model_config()
        assert config["backend"] == "python" and config["input"][0]["data_type"] == "TYPE_STRING"
        assert backend.model_metadata()["outputs"][0]["datatype"] == "BYTES"
        assert backend.stats()["model_stats"][0]["inference_count"] >= len(images)
        assert backend.version().startswith("triton 2.")
    finally:
        backend.stop()

    data = DataRef(source="sample_images", preprocess="image_imagenet", postprocess="topk", processing="server")
    samples, _ = resolve_request_data(data, meta, client=None, cache_dir=tmp_path)

    async def run() -> list:
        return [
            r
            async for r in run_backend(
                "triton",
                [point],
                ServerRun(model=meta, model_path=path, workdir=tmp_path / "run", host_facts=HOST, slo=None, samples=samples),
            )
        ]

    (result,) = asyncio.run(run())
    assert result.errors == 0, result.error_sample
    # Triton's python responses carry no per-request timings: the stages come from the model's custom metrics.
    stats = result.server_stats
    assert stats is not None and stats.preprocess_ms_mean and stats.preprocess_ms_mean > 0, stats
    assert stats.postprocess_ms_mean is not None and stats.postprocess_ms_mean > 0


def test_torchscript_server_runs_the_processors(tmp_path: Path) -> None:
    """The same processors on our TorchScript server (the shared KServe layer): top-1 equals torch in-process."""
    torch = pytest.importorskip("torch", reason="the torch extra is not installed (scripts/setup.sh installs it)")
    from follower.servers.processing import image_to_tensor, raw_sample_images

    torch.manual_seed(10)
    module = torch.jit.trace(
        torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 10)).eval(),
        torch.zeros(1, 3, SIDE, SIDE),
    )
    path = tmp_path / "imgcls.pt"
    module.save(str(path))
    images = raw_sample_images()
    with torch.inference_mode():
        batch = torch.from_numpy(np.stack([image_to_tensor(img, SIDE) for img in images]))
        expected = [int(i) for i in module(batch).argmax(dim=1)]
    signature = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [-1, 3, SIDE, SIDE]}],
                 "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]}  # fmt: skip
    port = free_port()
    argv = [sys.executable, "-m", "follower.servers.torchscript_server", "--model", str(path), "--name", "imgcls",
            "--port", str(port), "--signature", json.dumps(signature), "--preprocess", "image_imagenet",
            "--postprocess", "topk"]  # fmt: skip
    with SupervisedProcess(argv, name="torchscript server (processing)", log_path=tmp_path / "ts.log", cwd=ROOT) as proc:
        url = f"http://127.0.0.1:{port}"
        proc.wait_ready(http_ready(f"{url}/v2/health/ready"), timeout_s=60)
        data = [base64.b64encode(img).decode("ascii") for img in images]
        body = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [len(data), 1], "data": data}]}
        response = httpx.post(f"{url}/v2/models/imgcls/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    (out,) = response.json()["outputs"]
    assert [json.loads(text)[0]["index"] for text in out["data"]] == expected
    assert response.json()["parameters"]["preprocess_ns"] > 0
