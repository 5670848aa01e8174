"""benchfleet's own ONNX Runtime model server: KServe v2 / Open Inference Protocol over HTTP (JSON tensors).

Run as `python -m follower.servers.ort_server --model PATH --name NAME --port P`. The session loads in a
background thread so that `/v2/health/live` answers at once and `/v2/health/ready` turns 200 when the
model can serve. The engine (validation, stage timings, dynamic batching) is follower.servers.engine; the HTTP and gRPC doors are
follower.servers.kserve_http and kserve_grpc; the process plumbing follower.servers.process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from common.devices import GPU_PROVIDERS
from common.formats.datatypes import ORT_TO_V2
from follower.servers import process
from follower.servers.engine import KServeModel
from follower.servers.process import add_common_args, engine_options

__all__ = ["ModelServer", "main", "parser"]


def _dims(shape: list[Any]) -> list[int]:
    """ORT shapes carry symbolic names or None for dynamic dimensions; KServe writes those as -1."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


class ModelServer(KServeModel):
    """One ONNX model run by an onnxruntime session."""

    platform = "onnxruntime_onnx"
    engine_version = ort.__version__

    def __init__(
        self,
        model_path: str,
        name: str,
        version: str,
        providers: list[str],
        intra_op_threads: int | None,
        device_id: int = 0,
        precision: str = "float32",
        calibration: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(model_path, name, version, **options)
        self.providers = providers
        self.device_id = device_id
        self.intra_op_threads = intra_op_threads
        self.precision = precision
        self.calibration = calibration  # int8_static: the npz of input samples it calibrates on

    @property
    def session(self) -> ort.InferenceSession | None:
        return self.handle

    def load(self) -> None:
        """Create the ORT session (blocking) and cache the signature."""
        options = ort.SessionOptions()
        if self.intra_op_threads is not None:
            options.intra_op_num_threads = self.intra_op_threads
        # Idle ORT worker threads spin by default; on a host shared with the load generator that spinning steals
        # the generator's core and shows up as send lag, so they sleep instead.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        providers: list[Any] = [(p, {"device_id": self.device_id}) if p in GPU_PROVIDERS else p for p in self.providers]
        model = self.model_path if self.precision == "float32" else converted(self.model_path, self.precision, self.calibration)
        session = ort.InferenceSession(model, sess_options=options, providers=providers)
        # ORT quietly falls back to the CPU when a requested provider cannot load (no CUDA, a CPU-only wheel):
        # a GPU benchmark that ran on the CPU would be a false result, so refuse to become ready instead.
        if session.get_providers()[0] != self.providers[0]:
            raise RuntimeError(
                f"{self.providers[0]} is not available to onnxruntime {ort.__version__} here "
                f"(available: {', '.join(ort.get_available_providers())})"
            )
        self.inputs = {
            i.name: {"name": i.name, "datatype": ORT_TO_V2.get(i.type, i.type), "shape": _dims(i.shape)}
            for i in session.get_inputs()
        }
        self.outputs = {
            o.name: {"name": o.name, "datatype": ORT_TO_V2.get(o.type, o.type), "shape": _dims(o.shape)}
            for o in session.get_outputs()
        }
        self.handle = session  # published last: readiness flips only when everything above is in place

    def run_batch(self, feeds: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """session.run on the feeds."""
        return list(self.handle.run(names, feeds))


def converted(model_path: str, precision: str, calibration: str | None = None) -> bytes:
    """The model in `precision` (common/spec/server.py Precision): INT8 weights with activations quantized at run time
    (onnxruntime.quantization.quantize_dynamic); INT8 weights and activations with the activations' ranges calibrated
    on `calibration` (an npz of input arrays, one row a sample: quantize_static, QDQ, min-max); or float16 throughout
    with float32 inputs and outputs. Done here, in the server's own process (and sandbox), as it loads; calibration
    runs the model (in this process) on the job's own request data."""
    import onnx

    if precision == "int8_static":
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        if calibration is None:
            raise ValueError("int8_static needs --calibration (the request data's samples as the model's inputs)")
        with np.load(calibration) as data:
            arrays = {name: data[name] for name in data.files}
        count = min(len(a) for a in arrays.values())

        class Samples(CalibrationDataReader):  # one sample at a time, each a batch of one
            def __init__(self) -> None:
                self.rows = iter(range(count))

            def get_next(self) -> dict[str, np.ndarray] | None:
                i = next(self.rows, None)
                return None if i is None else {name: a[i : i + 1] for name, a in arrays.items()}

        with tempfile.TemporaryDirectory(prefix="benchfleet-int8-") as tmp:
            out = Path(tmp) / "model.int8s.onnx"
            quantize_static(
                onnx.load(model_path),
                out,
                Samples(),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
            return out.read_bytes()

    if precision == "int8_dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # Given the model (not its path) the quantizer writes its scratch files in /tmp (the sandbox's own), not
        # beside the model, whose directory the server may not write.
        with tempfile.TemporaryDirectory(prefix="benchfleet-int8-") as tmp:
            out = Path(tmp) / "model.int8.onnx"
            quantize_dynamic(onnx.load(model_path), out, weight_type=QuantType.QInt8)
            return out.read_bytes()
    if precision == "float16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        return bytes(convert_float_to_float16(onnx.load(model_path), keep_io_types=True).SerializeToString())
    raise ValueError(f"unknown precision {precision!r}: float32, int8_dynamic, int8_static or float16")


def parser() -> argparse.ArgumentParser:
    """Command-line options of the server."""
    parser = argparse.ArgumentParser(prog="python -m follower.servers.ort_server", description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--intra-op-threads", type=int, default=None, help="ORT intra-op threads (default: ORT's own choice)")
    parser.add_argument("--provider", action="append", default=None, help="ORT execution provider; repeatable")
    parser.add_argument("--device-id", type=int, default=0, help="GPU ordinal for a GPU execution provider")
    parser.add_argument(
        "--precision",
        choices=["float32", "int8_dynamic", "int8_static", "float16"],
        default="float32",
        help="convert as it loads",
    )
    parser.add_argument("--calibration", default=None, help="int8_static: an npz of input samples to calibrate on")
    return parser


def _server(args: argparse.Namespace, cpus: set[int] | None) -> ModelServer:
    intra_op_threads = args.intra_op_threads or (len(cpus) if cpus else None)
    providers = args.provider or ["CPUExecutionProvider"]
    return ModelServer(
        args.model,
        args.name,
        args.version,
        providers,
        intra_op_threads,
        args.device_id,
        args.precision,
        args.calibration,
        **engine_options(args),
    )


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; exit 1 if the model failed to load."""
    return process.main(parser(), argv, _server)


if __name__ == "__main__":
    sys.exit(main())
