"""The ONNX Runtime backend: benchfleet's own KServe v2 server (follower.servers.ort_server) in a supervised process."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common.models import ModelMeta
from common.procs import SupervisedProcess, free_port, http_ready

# Where `python -m follower...` must run from: the directory that holds the `follower` and `common` packages.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


class OnnxRuntimeBackend:
    """Serves an .onnx file with onnxruntime behind the Open Inference Protocol."""

    name = "onnxruntime"

    def __init__(
        self,
        *,
        intra_op_threads: int | None = None,
        provider: str = "CPUExecutionProvider",
        host: str = "127.0.0.1",
        cpus: frozenset[int] | None = None,
    ) -> None:
        self.intra_op_threads = intra_op_threads
        self.cpus = cpus
        self.provider = provider
        self.host = host
        self.port: int | None = None
        self.process: SupervisedProcess | None = None
        self._model_name: str | None = None

    def version(self) -> str:
        """onnxruntime's version (imported lazily: the agent need not load ORT to list backends)."""
        import onnxruntime

        return str(onnxruntime.__version__)

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Spawn the server on a free loopback port with its log at workdir/onnxruntime.log."""
        if self.process is not None:
            raise RuntimeError("onnxruntime backend already started")
        self.port = free_port()
        self._model_name = model.name
        argv = [sys.executable, "-m", "follower.servers.ort_server", "--model", str(model_path), "--name", model.name]
        argv += ["--version", model.version, "--host", self.host, "--port", str(self.port), "--provider", self.provider]
        if self.intra_op_threads is not None:
            argv += ["--intra-op-threads", str(self.intra_op_threads)]
        if self.cpus:
            argv += ["--cpus", ",".join(str(c) for c in sorted(self.cpus))]
        # The server exits by itself if this process dies, even by SIGKILL.
        argv += ["--parent-pid", str(os.getpid())]
        self.process = SupervisedProcess(
            argv, name="onnxruntime server", log_path=Path(workdir) / "onnxruntime.log", cwd=_SOURCE_ROOT
        )
        self.process.start()

    def wait_ready(self, timeout_s: float) -> float:
        """Poll /v2/models/{name}/ready; the process is killed and an error raised on timeout or early exit."""
        if self.process is None or self._model_name is None:
            raise RuntimeError("onnxruntime backend not started")
        return self.process.wait_ready(http_ready(f"{self.endpoint}/v2/models/{self._model_name}/ready"), timeout_s)

    @property
    def endpoint(self) -> str:
        """http://host:port of the running server."""
        if self.port is None:
            raise RuntimeError("onnxruntime backend not started")
        return f"http://{self.host}:{self.port}"

    def infer_url(self, model: ModelMeta) -> str:
        """The model's KServe v2 infer URL."""
        return f"{self.endpoint}/v2/models/{model.name}/infer"

    def alive(self) -> bool:
        """Whether the server process is running."""
        return self.process is not None and self.process.alive()

    def stats(self) -> dict[str, Any]:
        """The server's request counters; {} when it cannot be asked."""
        if self.process is None or self._model_name is None or not self.process.alive():
            return {}
        try:
            with urllib.request.urlopen(f"{self.endpoint}/v2/models/{self._model_name}/stats", timeout=2.0) as response:  # noqa: S310
                return dict(json.loads(response.read()))
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def stop(self) -> None:
        """Stop the server process group (idempotent)."""
        if self.process is not None:
            self.process.stop()

    def log_tail(self, n_lines: int = 40) -> str:
        """The end of the server's log, for error reports."""
        return self.process.log_tail(n_lines) if self.process is not None else ""
