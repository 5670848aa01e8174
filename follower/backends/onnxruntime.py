"""The ONNX Runtime backend: benchfleet's own KServe v2 server (follower.servers.ort_server) in a supervised process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from common.procs import free_port
from common.spec.job import ServerOptions
from common.wire.models import ModelMeta
from follower.backends.artifacts import artifact
from follower.backends.process import SOURCE_ROOT, ProcessBackend
from follower.host.sandbox import Sandbox


def kserve_server_argv(
    module: str,
    model_file: Path,
    model: ModelMeta,
    host: str,
    port: int,
    cpus: frozenset[int] | None,
    server: ServerOptions,
    grpc_port: int | None = None,
    parent_pid: int | None = None,
) -> list[str]:
    """The command line shared by benchfleet's own model servers (module = follower.servers.<x>)."""
    argv = [sys.executable, "-m", module, "--model", str(model_file), "--name", model.name]
    argv += ["--version", model.version, "--host", host, "--port", str(port), "--instances", str(server.instances)]
    if server.dynamic_batching is not None:
        argv += ["--max-batch-size", str(server.dynamic_batching.max_batch_size)]
        argv += ["--max-queue-delay-us", str(server.dynamic_batching.max_queue_delay_us)]
    if grpc_port is not None:
        argv += ["--grpc-port", str(grpc_port)]
    # Server-side processing: the server takes raw data and runs the named benchfleet processors itself.
    if server.preprocess:
        argv += ["--preprocess", server.preprocess]
    if server.postprocess:
        argv += ["--postprocess", server.postprocess]
    if cpus:
        argv += ["--cpus", ",".join(str(c) for c in sorted(cpus))]
    if parent_pid is not None:  # the server exits by itself if this process dies, even by SIGKILL
        argv += ["--parent-pid", str(parent_pid)]
    return argv


class OnnxRuntimeBackend(ProcessBackend):
    """Serves an .onnx file with onnxruntime behind the Open Inference Protocol."""

    name = "onnxruntime"

    def __init__(
        self,
        *,
        intra_op_threads: int | None = None,
        provider: str | None = None,
        host: str = "127.0.0.1",
        cpus: frozenset[int] | None = None,
        server: ServerOptions | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        super().__init__(host=host, cpus=cpus, server=server, sandbox=sandbox)
        self.intra_op_threads = intra_op_threads if intra_op_threads is not None else self.server.threads
        self.provider = provider or self.server.ort_provider

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether onnxruntime is importable here (found without importing it), and why not."""
        if importlib.util.find_spec("onnxruntime") is None:
            return False, "onnxruntime is not installed"
        return True, "onnxruntime importable"

    def version(self) -> str:
        """onnxruntime's version (imported lazily: the agent need not load ORT to list backends)."""
        import onnxruntime

        return str(onnxruntime.__version__)

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Spawn the server on a free loopback port with its log at workdir/onnxruntime.log."""
        onnx_file = artifact(model_path, model, "onnx", workdir)
        port = self._new_port()
        self.grpc_port = free_port() if self.server.protocol == "grpc" else None
        argv = kserve_server_argv(
            "follower.servers.ort_server",
            onnx_file,
            model,
            self.host,
            port,
            self.cpus,
            self.server,
            self.grpc_port,
            self.parent_pid,
        )
        argv += ["--provider", self.provider]
        if self.provider != "CPUExecutionProvider":
            argv += ["--device-id", str(self.server.gpu_index)]
        if self.intra_op_threads is not None:
            argv += ["--intra-op-threads", str(self.intra_op_threads)]
        self._spawn(argv, workdir, model, cwd=SOURCE_ROOT)
