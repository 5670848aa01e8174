"""Fixtures for the follower's measurement side: a tiny ONNX model and a real ORT server process."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchfleet.generate.modelgen import mlp_onnx
from common.procs import SupervisedProcess, free_port, http_ready
from common.wire.models import ModelMeta, TensorSpec

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def mlp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    path.write_bytes(mlp_onnx(inputs=64, hidden=128, outputs=10, seed=0))
    return path


@pytest.fixture(scope="session")
def mlp_meta(mlp_path: Path) -> ModelMeta:
    return ModelMeta(
        name="mlp",
        version="1",
        format="onnx",
        inputs=[TensorSpec(name="input", datatype="FP32", shape=[-1, 64])],
        outputs=[TensorSpec(name="output", datatype="FP32", shape=[-1, 10])],
        sha256="0" * 64,
        size_bytes=mlp_path.stat().st_size,
        created_at=datetime.now(UTC),
    )


class OrtServer:
    def __init__(self, proc: SupervisedProcess, url: str) -> None:
        self.proc, self.url = proc, url


@contextlib.contextmanager
def serve_ort(model: Path, name: str, log_dir: Path, *extra: str) -> Iterator[OrtServer]:
    """benchfleet's ORT server as a real process serving `model` as `name` (extra: more server flags), ready."""
    port = free_port()
    argv = [sys.executable, "-m", "follower.servers.ort_server", "--model", str(model), "--name", name, "--port", str(port),
            *extra]  # fmt: skip
    with SupervisedProcess(argv, name=f"ort server ({name})", log_path=log_dir / "ort.log", cwd=ROOT) as proc:
        url = f"http://127.0.0.1:{port}"
        proc.wait_ready(http_ready(f"{url}/v2/health/ready"), timeout_s=30)
        yield OrtServer(proc, url)


@pytest.fixture(scope="module")
def ort_server(mlp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OrtServer]:
    """benchfleet's ORT server as a real process serving the MLP as "mlp"."""
    with serve_ort(mlp_path, "mlp", tmp_path_factory.mktemp("ort")) as server:
        yield server
