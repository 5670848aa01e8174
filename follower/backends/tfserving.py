"""The TensorFlow Serving backend: `tensorflow_model_server` on PATH (or the compose image's), REST and gRPC.

No binary can be installed on the development machines, so the live tests skip where it is absent; nothing is faked.
The stored model is a SavedModel directory zipped (format `savedmodel`, layout `saved_model.pb` + `variables/` at the
zip's root or under one folder); it is unpacked as version 1 of a model config benchfleet writes. Requests use TF
Serving's own REST dialect (`/v1/models/NAME:predict`, {"inputs": {name: nested lists}}); gRPC PredictionService
clients come from the optional `tensorflow-serving-api` extra.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from common.formats.ziplimits import check_archive
from common.procs import free_port
from common.wire.models import ModelMeta
from follower.backends.process import ProcessBackend
from follower.protocols import Endpoint

# A zipped SavedModel may unpack to at most this many times its upload (weights barely compress; graphs do a little).
UNPACK_FACTOR = 4

BINARY = "tensorflow_model_server"


def find_tfserving() -> Path | None:
    """tensorflow_model_server on PATH, or None."""
    found = shutil.which(BINARY)
    return Path(found) if found else None


def model_config(name: str, base_path: Path) -> str:
    """The model_config_list text TF Serving reads with --model_config_file."""
    return f"model_config_list {{\n  config {{ name: '{name}' base_path: '{base_path}' model_platform: 'tensorflow' }}\n}}\n"


def unpack_savedmodel(model_path: Path, dest: Path) -> Path:
    """Unzip a zipped SavedModel into dest/1 (TF Serving's version layout); refuses paths leaving dest."""
    version_dir = Path(dest) / "1"
    shutil.rmtree(dest, ignore_errors=True)
    version_dir.mkdir(parents=True)
    with zipfile.ZipFile(model_path) as zf:
        # What a SavedModel may inflate to: the ratio bound, and at most UNPACK_FACTOR x its upload.
        check_archive(zf, UNPACK_FACTOR * max(Path(model_path).stat().st_size, 1))
        names = zf.namelist()
        pb = [n for n in names if n.endswith("saved_model.pb")]
        if not pb:
            raise RuntimeError("the savedmodel zip holds no saved_model.pb")
        prefix = pb[0][: -len("saved_model.pb")]
        for name in names:
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            target = (version_dir / name[len(prefix) :]).resolve()
            if not target.is_relative_to(version_dir.resolve()):  # a path test, not a prefix test (../1evil/)
                raise RuntimeError(f"zip member {name!r} would leave the model directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
    return Path(dest)


class TFServingBackend(ProcessBackend):
    """Serves a SavedModel with TensorFlow Serving (REST for load; the gRPC port is opened on loopback too)."""

    name = "tfserving"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.binary = find_tfserving()
        self.grpc_port: int | None = None

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether tensorflow_model_server is on PATH, and why not."""
        binary = find_tfserving()
        if binary is None:
            return False, f"no {BINARY} on PATH"
        return True, f"{BINARY} at {binary}"

    def version(self) -> str:
        """The binary's --version line."""
        return "tensorflow_model_server" if self.binary is None else f"tensorflow_model_server ({self.binary})"

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Unpack the SavedModel, write the model config, spawn the server on free loopback ports."""
        if self.binary is None:
            raise RuntimeError(f"the tfserving backend is unavailable: no {BINARY} on PATH")
        if self.server.protocol == "grpc":
            # TF Serving's gRPC is tensorflow.serving.PredictionService, not KServe v2: its client is TensorFlow itself.
            raise RuntimeError(
                "server.protocol grpc is not supported for tfserving (PredictionService needs the "
                "tensorflow-serving-api extra); use protocol: http"
            )
        if model.format != "savedmodel":
            raise RuntimeError(f"TF Serving serves SavedModels; model {model.ref} is stored as {model.format}")
        base = unpack_savedmodel(Path(model_path), Path(workdir) / "tfserving-models" / model.name)
        config = Path(workdir) / "tfserving-models.config"
        config.write_text(model_config(model.name, base.resolve()))
        port = self._new_port()
        self.grpc_port = free_port()
        argv = [str(self.binary), f"--port={self.grpc_port}", f"--rest_api_port={port}", f"--model_config_file={config}"]
        argv += ["--grpc_socket_path=", "--file_system_poll_wait_seconds=0"]
        if self.server.threads is not None:
            argv += [f"--tensorflow_intra_op_parallelism={self.server.threads}", f"--rest_api_num_threads={self.server.threads}"]
        db = self.server.dynamic_batching
        if db is not None:
            params = Path(workdir) / "tfserving-batching.config"
            params.write_text(
                f"max_batch_size {{ value: {db.max_batch_size} }}\n"
                f"batch_timeout_micros {{ value: {db.max_queue_delay_us} }}\n"
                f"num_batch_threads {{ value: {self.server.instances} }}\n"
                + "".join(f"allowed_batch_sizes: {s}\n" for s in sorted(db.preferred_batch_sizes))
            )
            argv += ["--enable_batching=true", f"--batching_parameters_file={params}"]
        if self.cpus:
            argv = ["taskset", "-c", ",".join(str(c) for c in sorted(self.cpus)), *argv]
        self._spawn(argv, workdir, model)

    def runtime_paths(self) -> list[Path]:
        """The tensorflow_model_server binary (it links only system libraries)."""
        return [self.binary] if self.binary is not None else []

    def ready_url(self) -> str:
        """TF Serving's model status URL."""
        return f"{self.endpoint}/v1/models/{self._model_name}"

    def wait_ready(self, timeout_s: float) -> float:
        """Poll the model status until a version is AVAILABLE."""
        if self.process is None:
            raise RuntimeError("tfserving backend not started")
        return self.process.wait_ready(self._available, timeout_s)

    def _available(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url(), timeout=0.5) as response:  # noqa: S310 - loopback URL we built
                status = json.loads(response.read()).get("model_version_status", [])
        except (urllib.error.URLError, OSError, ValueError):
            return False
        return any(s.get("state") == "AVAILABLE" for s in status)

    def serves(self, model: ModelMeta) -> Endpoint:
        """TF Serving's REST API (its gRPC port is open on loopback, unused by the load)."""
        return Endpoint("tfserving-rest", self.endpoint, model.name)

    def stats_url(self) -> str:
        """TF Serving keeps no per-model stats over REST; its status document is what there is."""
        return self.ready_url()
