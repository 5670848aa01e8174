"""The Triton backend: a real `tritonserver` serving a repository benchfleet writes (follower.convert.triton_repo).

The binary is the first of: `tritonserver` on PATH (NGC images, compose/Helm), or the one scripts/install_triton.sh
extracted from the nvidia-pytriton wheel into .benchfleet/triton (python backend only: its models run ORT in a small
numpy<2 venv, whose bin/ goes first on PATH because the backend stub runs the first python3 there).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.procs import free_port
from common.wire.models import ModelMeta
from follower.backends.process import SOURCE_ROOT, ProcessBackend
from follower.convert.triton_repo import write_repository

EXTRACTED_HOME = SOURCE_ROOT / ".benchfleet" / "triton"


@dataclass(frozen=True)
class TritonInstall:
    """Where a usable tritonserver lives and how it must be launched."""

    binary: Path
    backend_dir: Path | None
    cache_dir: Path | None
    model_env_bin: Path | None  # the python backend's venv (extracted install only)

    @property
    def has_onnxruntime_backend(self) -> bool:
        """Whether models can use platform onnxruntime_onnx (else the python backend runs ORT)."""
        return self.backend_dir is not None and (self.backend_dir / "onnxruntime").is_dir()


def find_triton(home: Path | None = None) -> TritonInstall | None:
    """The Triton to use, or None; a binary on PATH wins over the extracted one."""
    on_path = shutil.which("tritonserver")
    if on_path:
        root = Path(on_path).resolve().parent.parent  # /opt/tritonserver/bin/tritonserver → /opt/tritonserver
        backends = root / "backends"
        return TritonInstall(Path(on_path), backends if backends.is_dir() else None, None, None)
    home = Path(os.environ.get("BENCHFLEET_TRITON_HOME", home or EXTRACTED_HOME))
    ts = home / "pytriton" / "tritonserver"
    binary = ts / "bin" / "tritonserver"
    env_bin = home / "modelenv" / "bin"
    if binary.is_file() and os.access(binary, os.X_OK) and (env_bin / "python3").exists():
        return TritonInstall(binary, ts / "backends", ts / "caches", env_bin)
    return None


def why_no_triton(home: Path | None = None) -> str:
    """Why find_triton() gives None, for skip messages and errors."""
    failed = Path(os.environ.get("BENCHFLEET_TRITON_HOME", home or EXTRACTED_HOME)) / "FAILED"
    detail = f" ({failed.read_text().strip()})" if failed.exists() else ""
    return f"no tritonserver on PATH and none extracted by scripts/install_triton.sh{detail}"


class TritonBackend(ProcessBackend):
    """Serves the model with a real Triton Inference Server (HTTP; gRPC port opened too, on loopback)."""

    name = "triton"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.install = find_triton()
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None
        self._version = "unknown"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether a tritonserver binary is found here, and why not."""
        install = find_triton()
        if install is None:
            return False, why_no_triton()
        return True, f"tritonserver at {install.binary}"

    # -- control plane through tritonclient.http (the data plane is the generator's own KServe v2 client) ----------

    def _control(self, call: Callable[[Any], Any], default: Any) -> Any:
        """`call(client)` on a fresh tritonclient.http client; `default` when Triton cannot be asked.

        A fresh client per call: geventhttpclient's pool belongs to the thread that made it, and the runner asks
        from asyncio.to_thread workers. On loopback the connection costs well under a millisecond.
        """
        if self.port is None or self.process is None or not self.process.alive():
            return default
        import tritonclient.http as triton_http
        from tritonclient.utils import InferenceServerException

        client = triton_http.InferenceServerClient(f"{self.host}:{self.port}", connection_timeout=2.0, network_timeout=2.0)
        try:
            return call(client)
        except (InferenceServerException, OSError, ConnectionError, TimeoutError, ValueError):
            return default
        finally:
            client.close()

    def wait_ready(self, timeout_s: float) -> float:
        """Poll tritonclient's is_model_ready; the process is killed and an error raised on timeout or early exit."""
        if self.process is None or self._model_name is None:
            raise RuntimeError(f"{self.name} backend not started")
        name = self._model_name
        return self.process.wait_ready(lambda: bool(self._control(lambda c: c.is_model_ready(name), False)), timeout_s)

    def model_metadata(self) -> dict[str, Any]:
        """The served model's KServe v2 metadata (inputs, outputs, platform); {} when unreachable."""
        return dict(self._control(lambda c: c.get_model_metadata(self._model_name), {}))

    def model_config(self) -> dict[str, Any]:
        """The configuration Triton actually loaded (max_batch_size, dynamic_batching, instance_group); {} if unknown."""
        return dict(self._control(lambda c: c.get_model_config(self._model_name), {}))

    def version(self) -> str:
        """Triton's version as its server metadata reports it."""
        if self._version == "unknown":
            self._version = str(self._control(lambda c: c.get_server_metadata().get("version", "unknown"), "unknown"))
        return f"triton {self._version}"

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Write the model repository under workdir/triton-repo and spawn tritonserver on free loopback ports."""
        if self.install is None:
            raise RuntimeError(f"the triton backend is unavailable on this follower: {why_no_triton()}")
        onnx_file = self.served_file(model_path, model, "onnx", workdir)
        repo = Path(workdir) / "triton-repo"
        shutil.rmtree(repo, ignore_errors=True)
        write_repository(onnx_file, model, repo, self.server, onnxruntime_backend=self.install.has_onnxruntime_backend)
        port = self._new_port()
        self.grpc_port, self.metrics_port = free_port(), free_port()
        argv = [str(self.install.binary), f"--model-repository={repo}"]
        if self.install.backend_dir is not None:
            argv.append(f"--backend-directory={self.install.backend_dir}")
        if self.install.cache_dir is not None:
            argv.append(f"--cache-directory={self.install.cache_dir}")
        argv += ["--http-address", self.host, "--http-port", str(port), "--grpc-address", self.host]
        argv += ["--grpc-port", str(self.grpc_port), "--metrics-address", self.host, "--metrics-port", str(self.metrics_port)]
        argv += ["--allow-metrics", "true", "--allow-gpu-metrics", "false", "--disable-auto-complete-config"]
        argv += ["--exit-timeout-secs", "5", "--log-verbose", "0"]
        if self.cpus:
            # taskset pins Triton and everything it spawns (python backend stubs) to the server's cores.
            argv = ["taskset", "-c", ",".join(str(c) for c in sorted(self.cpus)), *argv]
        self._spawn(argv, workdir, model, grace_s=8.0)

    def environment(self) -> dict[str, str]:
        """The scrubbed environment; the extracted install's python backend also needs its venv and libpython."""
        env = super().environment()
        if self.install is not None and self.install.model_env_bin is not None:
            # The backend stub links libpython of this interpreter's version and runs the first python3 on PATH.
            env["PATH"] = f"{self.install.model_env_bin}{os.pathsep}{env.get('PATH', '')}"
            libdir = sysconfig.get_config_var("LIBDIR") or ""
            env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
        return env

    def runtime_paths(self) -> list[Path]:
        """Triton's install (binary, backends, the python backend's venv) and the Python its stub links."""
        if self.install is None:
            return []
        paths = [self.install.binary.parent.parent, Path(sys.base_prefix)]
        if self.install.model_env_bin is not None:  # the extracted install: its libraries lie beside pytriton/
            paths.append(self.install.model_env_bin.parent.parent)
        paths += [p for p in (self.install.backend_dir, self.install.cache_dir) if p is not None]
        return paths

    def metrics(self) -> dict[str, float]:
        """Triton's Prometheus counters (nv_inference_*, benchfleet_*), summed over labels; {} when unreachable."""
        if self.metrics_port is None or not self.alive():
            return {}
        try:
            url = f"http://{self.host}:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=2.0) as response:  # noqa: S310 - loopback URL we built
                text = response.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError):
            return {}
        return parse_metrics(text)

    def stats(self) -> dict[str, Any]:
        """Triton's per-model statistics (queue, compute_input/infer/output) plus its scraped metrics."""
        out = dict(self._control(lambda c: c.get_inference_statistics(self._model_name), {}))
        metrics = self.metrics()
        if metrics:
            out["metrics"] = metrics
        return out


# Triton's own series (nv_*) and those benchfleet's python model adds (benchfleet_*: server-side processing time).
_METRIC_LINE = re.compile(r"^((?:nv|benchfleet)_[a-z_]+)(?:\{[^}]*\})?\s+([0-9.eE+-]+)$")


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each nv_* (and benchfleet_*) series of a Prometheus text exposition over its labels."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _METRIC_LINE.match(line.strip())
        if match:
            out[match.group(1)] = out.get(match.group(1), 0.0) + float(match.group(2))
    return out
