"""The TorchScript backend: benchfleet's own KServe v2 server around torch.jit (follower.servers.torchscript_server)."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from common.wire.models import ModelMeta
from follower.backends.process import SOURCE_ROOT, ProcessBackend


def torch_available() -> str | None:
    """torch's version if it is installed (without importing it: that takes seconds), else None."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


class TorchScriptBackend(ProcessBackend):
    """Serves a TorchScript file (or a bundle's model.pt) behind the Open Inference Protocol."""

    name = "torchscript"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether torch is installed here, and why not."""
        version = torch_available()
        if version is None:
            return False, "PyTorch is not installed (pip install 'benchfleet[torch]')"
        return True, f"torch {version}"

    def version(self) -> str:
        """torch's version."""
        return torch_available() or "absent"

    def start(self, model_path: Path, model: ModelMeta, workdir: Path) -> None:
        """Spawn the server on a free loopback port with its log at workdir/torchscript.log."""
        if torch_available() is None:
            raise RuntimeError("the torchscript backend needs PyTorch on this follower (pip install 'benchfleet[torch]')")
        ts_file = self.served_file(model_path, model, "torchscript", workdir)
        self._spawn(self.argv(ts_file, model), workdir, model, cwd=SOURCE_ROOT)

    def argv(self, ts_file: Path, model: ModelMeta) -> list[str]:
        """The server's command line (on a new port): the model's signature and the device it runs on."""
        argv = self._own_server_argv("follower.servers.torchscript_server", ts_file, model)
        signature = {"inputs": [t.model_dump() for t in model.inputs], "outputs": [t.model_dump() for t in model.outputs]}
        argv += ["--signature", json.dumps(signature), "--device", self.server.device]
        if self.server.threads is not None:
            argv += ["--threads", str(self.server.threads)]
        return argv
