"""The ONNX Runtime backend: benchfleet's own KServe v2 server (follower.servers.ort_server) in a supervised process."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from common.spec.server import ServerOptions
from common.wire.models import ModelMeta
from follower.backends.process import SOURCE_ROOT, ProcessBackend
from follower.host.sandbox import Sandbox

CALIBRATION_FILE = "calibration.npz"  # the request data's first samples as the model's inputs (int8_static)


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
        """Spawn the server on a free loopback port with its log at workdir/onnxruntime.log (static INT8 calibrates on
        workdir/CALIBRATION_FILE, which the attempt writes from the job's request data)."""
        onnx_file = self.served_file(model_path, model, "onnx", workdir)
        self._spawn(self.argv(onnx_file, model, calibration=workdir / CALIBRATION_FILE), workdir, model, cwd=SOURCE_ROOT)

    def argv(self, onnx_file: Path, model: ModelMeta, *, calibration: Path | None = None) -> list[str]:
        """The server's command line (on a new port): the execution provider and, for a GPU one, the GPU; the
        precision it converts the model to as it loads (int8_static: with the `calibration` samples)."""
        argv = self._own_server_argv("follower.servers.ort_server", onnx_file, model)
        argv += ["--provider", self.provider]
        if self.provider != "CPUExecutionProvider":
            argv += ["--device-id", str(self.server.gpu_index)]
        if self.intra_op_threads is not None:
            argv += ["--intra-op-threads", str(self.intra_op_threads)]
        if self.server.precision != "float32":
            argv += ["--precision", self.server.precision]
        if self.server.precision == "int8_static":
            if calibration is None or not calibration.is_file():
                raise RuntimeError("server.precision int8_static has no calibration samples (the job's request data)")
            argv += ["--calibration", str(calibration)]
        return argv
