"""Client-side post-processing reads real answers on every tensor protocol: our ORT server over KServe v2 HTTP and gRPC
and the TF Serving stand-ins over REST and gRPC (each wanting its API key) answer one request outside any load; the
decoded outputs equal ONNX Runtime's in this process, the top-k post-processor ranks them with the data set's labels,
and its cost per answer is timed. An answer without one [batch, classes] float output fails naming data.postprocess."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from benchfleet.generate.modelgen import mlp_onnx
from common.procs import free_port
from follower.point.postprocess import PostprocessError, postprocess_ms, scores_of
from follower.protocols import PROTOCOLS, Credentials, Endpoint
from follower.servers.processing import top_k
from tests.e2e.endpoint_servers import tfserving_grpc, tfserving_rest
from tests.integration.follower.conftest import serve_ort

pytestmark = pytest.mark.integration

LABELS = ("cat", "dog", "bird")


@contextlib.contextmanager
def _our_server(work: Path, protocol: str) -> Iterator[tuple[Endpoint, Credentials, Path]]:
    path = work / "mlp.onnx"
    path.write_bytes(mlp_onnx(inputs=12, hidden=32, outputs=3, seed=4))
    grpc_port = free_port()
    with serve_ort(path, "mlp", work, "--grpc-port", str(grpc_port)) as server:
        base = server.url if protocol == "kserve-http" else f"grpc://127.0.0.1:{grpc_port}"
        yield Endpoint(protocol, base, "mlp"), Credentials(), path  # type: ignore[arg-type]


@contextlib.contextmanager
def _tf_standin(work: Path, protocol: str) -> Iterator[tuple[Endpoint, Credentials, Path]]:
    serve = tfserving_rest if protocol == "tfserving-rest" else tfserving_grpc
    with serve(work, "mlp", version=3) as gated:
        yield Endpoint(protocol, gated.url, "mlp", "3"), Credentials(headers=(("X-Api-Key", gated.key),)), work / "mlp.onnx"  # type: ignore[arg-type]


@pytest.mark.parametrize("protocol", ["kserve-http", "kserve-grpc", "tfserving-rest", "tfserving-grpc"])
def test_each_protocols_answer_is_decoded_and_post_processed(tmp_path: Path, protocol: str) -> None:
    start = _our_server if protocol.startswith("kserve") else _tf_standin
    batch = np.random.default_rng(7).standard_normal((4, 12)).astype(np.float32)
    entry = {"name": "input", "datatype": "FP32", "shape": [4, 12], "data": batch.ravel().tolist()}
    wire = PROTOCOLS[protocol]
    with start(tmp_path, protocol) as (endpoint, credentials, path):
        body = wire.encode([entry])
        outputs = wire.outputs(endpoint, body, credentials)
        expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": batch})[0]
        scores = scores_of("topk", outputs)
        assert scores.shape == (4, 3) and np.allclose(scores, expected, atol=1e-5), (outputs, expected)
        ranked = top_k(scores, k=2, labels=LABELS)
        assert [row[0]["label"] for row in ranked] == [LABELS[i] for i in expected.argmax(axis=1)]
        ms = postprocess_ms("topk", [body] * 3, endpoint=endpoint, credentials=credentials, labels=LABELS)
        assert 0 < ms < 1000


def test_an_answer_without_one_score_output_fails_naming_the_field() -> None:
    with pytest.raises(PostprocessError, match=r"data.postprocess: topk .* held ids int64\[4\]"):
        scores_of("topk", {"ids": np.arange(4)})
    two = {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 5), np.float32)}
    with pytest.raises(PostprocessError, match="data.postprocess"):
        scores_of("topk", two)
