"""Endpoints started by hand for the endpoint and shard tests: benchfleet's ORT server as a plain process, behind a
gateway that wants an API key (tests/e2e/auth_proxy.py), as a team's own deployment would be; and the stand-in for a
tensorflow_model_server's gRPC and REST APIs (tests/e2e/tfserving_standin.py, tfserving_rest_standin.py), behind the
same kind of key."""

from __future__ import annotations

import contextlib
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx

from benchfleet.generate.modelgen import mlp_onnx
from common.procs import SupervisedProcess, free_port, http_ready

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class GatedEndpoint:
    url: str  # the gateway's base URL (KServe v2 HTTP behind it)
    key: str  # the X-Api-Key it wants
    model: str  # the model's name there

    def counts(self) -> dict[str, int]:
        """Requests the gateway forwarded (authorized) and refused so far."""
        return dict(httpx.get(f"{self.url}/counts").json())


@contextlib.contextmanager
def gated_ort(work: Path, model: str, *, inputs: int = 16) -> Iterator[GatedEndpoint]:
    """The ORT server serving a small MLP as `model`, started by hand, behind the API-key gateway; both stopped after."""
    path = work / f"{model}.onnx"
    path.write_bytes(mlp_onnx(inputs=inputs, hidden=32, outputs=4, seed=3))
    key = "sk-" + secrets.token_urlsafe(24)
    (work / "key").write_text(key)  # not argv: a key in argv shows in `ps`
    ort_port, gate_port = free_port(), free_port()
    ort_argv = [sys.executable, "-m", "follower.servers.ort_server", "--model", str(path), "--name", model,
                "--port", str(ort_port)]  # fmt: skip
    gate_argv = [sys.executable, "-m", "tests.e2e.auth_proxy", "--port", str(gate_port), "--upstream",
                 f"http://127.0.0.1:{ort_port}", "--header", "X-Api-Key", "--key-file", str(work / "key")]  # fmt: skip
    with SupervisedProcess(ort_argv, name="ort by hand", log_path=work / "ort.log", cwd=ROOT) as ort:
        ort.wait_ready(http_ready(f"http://127.0.0.1:{ort_port}/v2/health/ready"), timeout_s=30)
        with SupervisedProcess(gate_argv, name="api gateway", log_path=work / "gate.log", cwd=ROOT) as gate:
            gate.wait_ready(http_ready(f"http://127.0.0.1:{gate_port}/counts"), timeout_s=30)
            yield GatedEndpoint(f"http://127.0.0.1:{gate_port}", key, model)


@contextlib.contextmanager
def tfserving_grpc(work: Path, model: str, *, version: int = 3) -> Iterator[GatedEndpoint]:
    """TF Serving's gRPC API for a small MLP as `model` (version `version`), wanting an x-api-key; stopped after."""
    path = work / f"{model}.onnx"
    path.write_bytes(mlp_onnx(inputs=12, hidden=32, outputs=3, seed=4))
    key = "sk-" + secrets.token_urlsafe(24)
    (work / "key").write_text(key)
    port = free_port()
    argv = [sys.executable, "-m", "tests.e2e.tfserving_standin", "--port", str(port), "--model", str(path), "--name", model,
            "--version", str(version), "--key-file", str(work / "key")]  # fmt: skip

    def listening() -> bool:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=0.5)
                return True
            except grpc.FutureTimeoutError:
                return False

    with SupervisedProcess(argv, name="tf serving stand-in", log_path=work / "tfserving.log", cwd=ROOT) as server:
        server.wait_ready(listening, timeout_s=30)
        yield GatedEndpoint(f"grpc://127.0.0.1:{port}", key, model)


@contextlib.contextmanager
def tfserving_rest(work: Path, model: str, *, version: int = 3, label: str = "stable") -> Iterator[GatedEndpoint]:
    """TF Serving's REST API for a small MLP as `model` (version `version`, labelled `label`), wanting an X-Api-Key;
    stopped after."""
    path = work / f"{model}.onnx"
    path.write_bytes(mlp_onnx(inputs=12, hidden=32, outputs=3, seed=4))
    key = "sk-" + secrets.token_urlsafe(24)
    (work / "key").write_text(key)
    port = free_port()
    argv = [sys.executable, "-m", "tests.e2e.tfserving_rest_standin", "--port", str(port), "--model", str(path)]
    argv += ["--name", model, "--version", str(version), "--label", label, "--key-file", str(work / "key")]
    with SupervisedProcess(argv, name="tf serving rest stand-in", log_path=work / "tfserving-rest.log", cwd=ROOT) as server:
        server.wait_ready(http_ready(f"http://127.0.0.1:{port}/counts"), timeout_s=30)
        yield GatedEndpoint(f"http://127.0.0.1:{port}", key, model)
