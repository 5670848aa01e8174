"""benchfleet's own TorchScript model server: the same KServe v2 HTTP layer as the ORT server, torch.jit inside.

A TorchScript file carries no typed signature, so the caller passes one (`--signature` JSON: {"inputs": [...],
"outputs": [...]} as in ModelMeta); inputs are fed to `forward` positionally in that order, and a tuple of outputs is
named in that order. Run as `python -m follower.servers.torchscript_server --model PATH --name NAME --port P
--signature JSON`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from follower.servers import process
from follower.servers.engine import KServeModel
from follower.servers.process import add_common_args, engine_options


class TorchScriptServer(KServeModel):
    """One TorchScript module run with torch.jit under no_grad."""

    platform = "pytorch_libtorch"

    def __init__(
        self,
        model_path: str,
        name: str,
        version: str,
        signature: dict[str, Any],
        threads: int | None,
        device: str = "cpu",
        **options: Any,
    ) -> None:
        super().__init__(model_path, name, version, **options)
        self.signature = signature
        self.threads = threads
        self.device_name = device
        self._torch: Any = None
        self._device: Any = None

    def load(self) -> None:
        """torch.jit.load the module (blocking) and take the signature given on the command line."""
        import torch

        self.engine_version = torch.__version__
        if self.threads:
            torch.set_num_threads(self.threads)
        torch.set_num_interop_threads(1)
        if self.device_name.startswith("cuda") and not torch.cuda.is_available():
            # Never fall back to the CPU: a GPU benchmark that ran on the CPU would be a false result.
            raise RuntimeError(f"device {self.device_name} asked for, but CUDA is not available to torch {torch.__version__}")
        self._device = torch.device(self.device_name)
        module = torch.jit.load(self.model_path, map_location=self._device).eval()
        self.inputs = {
            i["name"]: {"name": i["name"], "datatype": i["datatype"], "shape": i["shape"]} for i in self.signature["inputs"]
        }
        self.outputs = {
            o["name"]: {"name": o["name"], "datatype": o["datatype"], "shape": o["shape"]} for o in self.signature["outputs"]
        }
        self._torch = torch
        self.handle = module  # published last: readiness flips only when everything above is in place

    def run_batch(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """forward(*inputs in signature order); outputs picked by name.

        On a GPU the copies in and out are part of the inference stage, as they are for any GPU server; `.cpu()`
        waits for the kernels, so the stage ends when the answer exists.
        """
        torch = self._torch
        args = [torch.from_numpy(np.ascontiguousarray(feeds[name])).to(self._device) for name in self.inputs]
        with torch.inference_mode():
            out = self.handle(*args)
        outs = list(out) if isinstance(out, tuple | list) else [out]
        by_name = dict(zip(self.outputs, outs, strict=False))
        return [by_name[n].cpu().numpy() for n in names]


def parser() -> argparse.ArgumentParser:
    """Command-line options of the server."""
    parser = argparse.ArgumentParser(prog="python -m follower.servers.torchscript_server", description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--signature", required=True, help='JSON {"inputs": [...], "outputs": [...]} (ModelMeta form)')
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: one per pinned CPU)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N")
    return parser


def _server(args: argparse.Namespace, cpus: set[int] | None) -> TorchScriptServer:
    threads = args.threads or (len(cpus) if cpus else None)
    signature = json.loads(args.signature)
    return TorchScriptServer(args.model, args.name, args.version, signature, threads, args.device, **engine_options(args))


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; exit 1 if the model failed to load."""
    return process.main(parser(), argv, _server)


if __name__ == "__main__":
    sys.exit(main())
