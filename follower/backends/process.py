"""What every backend that runs one supervised server process shares: ports, readiness, stats, stop, log tail."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common import tracing
from common.procs import SupervisedProcess, free_port, http_ready
from common.spec.server import ServerOptions
from common.wire.models import ModelMeta
from common.wire.results import Conversion
from follower.backends.artifacts import artifact
from follower.convert import user_model
from follower.host.sandbox import Sandbox, server_environment
from follower.protocols import Endpoint

SOURCE_ROOT = Path(__file__).resolve().parents[2]


class ProcessBackend:
    """A serving system in one supervised process group, answering KServe v2 on `endpoint`."""

    name = "process"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        cpus: frozenset[int] | None = None,
        server: ServerOptions | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.host = sandbox.host if sandbox is not None else host
        self.cpus = cpus
        self.server = server or ServerOptions()
        self.port: int | None = None
        self.grpc_port: int | None = None  # set by start() when the server also speaks KServe v2 gRPC
        self.process: SupervisedProcess | None = None
        self._model_name: str | None = None
        self.extra_env: dict[str, str] = {}
        self.conversion: Conversion | None = None  # set by start() when it serves the user's model converted

    def environment(self) -> dict[str, str]:
        """The server's environment: the follower's, scrubbed of everything serving does not need (no credentials)."""
        return server_environment(self.extra_env)

    def served_file(self, model_path: Path, model: ModelMeta, kind: str, workdir: Path) -> Path:
        """The model in the form this server reads (onnx, torchscript): the stored file, a bundle's member, or the
        user's model converted in this server's sandbox (follower/convert/user_model.py; its check kept in
        `conversion`)."""
        if user_model.converts(model, kind):
            with tracing.span("model.convert", attributes={"benchfleet.from": model.format, "benchfleet.to": kind}):
                path, self.conversion = user_model.convert(
                    model_path,
                    model,
                    kind,
                    workdir,
                    sandbox=self.sandbox,
                    runtime=self.runtime_paths(),
                    source_root=SOURCE_ROOT,
                )
            return path
        return artifact(model_path, model, kind, workdir)

    def runtime_paths(self) -> list[Path]:
        """What the server reads besides its model and work directory (here: benchfleet's Python and its code)."""
        return [Path(sys.prefix), Path(sys.base_prefix), *(SOURCE_ROOT / p for p in ("common", "follower", "protos"))]

    @property
    def parent_pid(self) -> int | None:
        """The pid a benchfleet server watches to exit with the follower (in a sandbox, bubblewrap does that)."""
        return None if self.sandbox is not None else os.getpid()

    def _spawn(
        self,
        argv: list[str],
        workdir: Path,
        model: ModelMeta,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        grace_s: float = 10.0,
    ) -> None:
        """Start the server: in the sandbox when there is one, always with the scrubbed environment."""
        if self.process is not None:
            raise RuntimeError(f"{self.name} backend already started")
        self._model_name = model.name
        env = env if env is not None else self.environment()
        if self.sandbox is not None:
            self.sandbox.allow_read(self.runtime_paths())
            argv, cwd = self.sandbox.command(argv, cwd=cwd), None
        self.process = SupervisedProcess(
            argv, name=f"{self.name} server", log_path=Path(workdir) / f"{self.name}.log", env=env, cwd=cwd, grace_s=grace_s
        )
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

    def serves(self, model: ModelMeta) -> Endpoint:
        """KServe v2 over HTTP, or over gRPC with `server.protocol: grpc`."""
        if self.server.protocol == "grpc":
            if self.grpc_port is None:
                raise RuntimeError(f"{self.name} backend has no gRPC port (not started, or gRPC not supported)")
            return Endpoint("kserve-grpc", f"grpc://{self.host}:{self.grpc_port}", model.name)
        return Endpoint("kserve-http", self.endpoint, model.name)

    def pid(self) -> int | None:
        """The server's process (the root of the tree the sampler follows), once started."""
        return self.process.pid if self.process is not None else None

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

    def _own_server_argv(self, module: str, model_file: Path, model: ModelMeta) -> list[str]:
        """The command line of one of benchfleet's own KServe v2 servers (module = follower.servers.<x>), on a new
        port, and on a gRPC one too where server.protocol asks for it."""
        server, port = self.server, self._new_port()
        self.grpc_port = free_port() if server.protocol == "grpc" else None
        argv = [sys.executable, "-m", module, "--model", str(model_file), "--name", model.name]
        argv += ["--version", model.version, "--host", self.host, "--port", str(port), "--instances", str(server.instances)]
        if server.dynamic_batching is not None:
            argv += ["--max-batch-size", str(server.dynamic_batching.max_batch_size)]
            argv += ["--max-queue-delay-us", str(server.dynamic_batching.max_queue_delay_us)]
        if self.grpc_port is not None:
            argv += ["--grpc-port", str(self.grpc_port)]
        # Server-side processing: the server takes raw data and runs the named benchfleet processors itself.
        if server.preprocess:
            argv += ["--preprocess", server.preprocess]
        if server.postprocess:
            argv += ["--postprocess", server.postprocess]
        if self.cpus:
            argv += ["--cpus", ",".join(str(c) for c in sorted(self.cpus))]
        if self.parent_pid is not None:  # the server exits by itself if this process dies, even by SIGKILL
            argv += ["--parent-pid", str(self.parent_pid)]
        return argv
