"""What every backend that runs one supervised server process shares: ports, readiness, stats, stop, log tail."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common.models import ModelMeta
from common.procs import SupervisedProcess, free_port, http_ready
from common.spec import ServerOptions


class ProcessBackend:
    """A serving system in one supervised process group, answering KServe v2 on `endpoint`."""

    name = "process"

    def __init__(self, *, host: str = "127.0.0.1", cpus: frozenset[int] | None = None,
                 server: ServerOptions | None = None) -> None:
        self.host = host
        self.cpus = cpus
        self.server = server or ServerOptions()
        self.port: int | None = None
        self.grpc_port: int | None = None  # set by start() when the server also speaks KServe v2 gRPC
        self.process: SupervisedProcess | None = None
        self._model_name: str | None = None

    def _spawn(self, argv: list[str], workdir: Path, model: ModelMeta, **kwargs: Any) -> None:
        if self.process is not None:
            raise RuntimeError(f"{self.name} backend already started")
        self._model_name = model.name
        self.process = SupervisedProcess(argv, name=f"{self.name} server", log_path=Path(workdir) / f"{self.name}.log", **kwargs)
        self.process.start()

    def ready_url(self) -> str:
        """The URL that answers 200 once the model serves."""
        return f"{self.endpoint}/v2/models/{self._model_name}/ready"

    def wait_ready(self, timeout_s: float) -> float:
        """Poll the readiness URL; the process is killed and an error raised on timeout or early exit."""
        if self.process is None or self._model_name is None:
            raise RuntimeError(f"{self.name} backend not started")
        return self.process.wait_ready(http_ready(self.ready_url()), timeout_s)

    @property
    def endpoint(self) -> str:
        """http://host:port of the running server."""
        if self.port is None:
            raise RuntimeError(f"{self.name} backend not started")
        return f"http://{self.host}:{self.port}"

    def infer_url(self, model: ModelMeta) -> str:
        """The model's KServe v2 infer URL: HTTP, or grpc://host:port/model with `server.protocol: grpc`."""
        if self.server.protocol == "grpc":
            if self.grpc_port is None:
                raise RuntimeError(f"{self.name} backend has no gRPC port (not started, or gRPC not supported)")
            return f"grpc://{self.host}:{self.grpc_port}/{model.name}"
        return f"{self.endpoint}/v2/models/{model.name}/infer"

    def alive(self) -> bool:
        """Whether the server process is running."""
        return self.process is not None and self.process.alive()

    def stats_url(self) -> str:
        """Where the server keeps its statistics."""
        return f"{self.endpoint}/v2/models/{self._model_name}/stats"

    def stats(self) -> dict[str, Any]:
        """The server's own statistics; {} when it cannot be asked."""
        if self.process is None or self._model_name is None or not self.process.alive():
            return {}
        try:
            with urllib.request.urlopen(self.stats_url(), timeout=2.0) as response:  # noqa: S310 - loopback URL we built
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

    def _new_port(self) -> int:
        self.port = free_port()
        return self.port
