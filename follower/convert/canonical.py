"""The canonical model generator (after the paper): FC, residual-conv, LSTM and attention stacks by depth/width/input
size, exported to ONNX and TorchScript (each checked against the PyTorch source), with FLOPs and bytes per inference.

The result is a bundle (common.formats.bundle): one upload holding both formats, so one job can serve the same model on
onnxruntime, torchscript and triton.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from common.formats.bundle import ONNX_MEMBER, TORCHSCRIPT_MEMBER, write_bundle
from common.wire.models import ModelMeta, TensorSpec

Kind = Literal["fc", "conv", "lstm", "attention"]
KINDS: tuple[str, ...] = ("fc", "conv", "lstm", "attention")
N_CLASSES = 10
LSTM_FEATURES = 16
FP32_BYTES = 4


@dataclass(frozen=True)
class CanonicalSpec:
    """Which canonical model: block kind, depth (blocks), width (units/channels/model dim), input size."""

    kind: Kind
    depth: int = 2
    width: int = 64
    input_size: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not (1 <= self.depth <= 64 and 1 <= self.width <= 4096 and 1 <= self.input_size <= 4096):
            raise ValueError("depth must be 1..64, width and input_size 1..4096")

    def input_shape(self) -> list[int]:
        """The input shape with -1 for the batch."""
        return {
            "fc": [-1, self.input_size],
            "conv": [-1, 3, self.input_size, self.input_size],
            "lstm": [-1, self.input_size, LSTM_FEATURES],
            "attention": [-1, self.input_size, self.width],
        }[self.kind]


def cost(spec: CanonicalSpec) -> dict[str, int]:
    """FLOPs (multiply-add = 2) and bytes moved per inference at batch 1, counted analytically for the roofline.

    Bytes = weights read once + input read + every layer's activations written and read once (FP32); element-wise
    ops and normalisation are left out of the FLOPs (they are memory-bound and small next to the matmuls).
    """
    d, w, s = spec.depth, spec.width, spec.input_size
    if spec.kind == "fc":
        params = (s * w + w) + d * (w * w + w) + (w * N_CLASSES + N_CLASSES)
        flops = 2 * (s * w + d * w * w + w * N_CLASSES)
        activations = w * (d + 1) + N_CLASSES
        inputs = s
    elif spec.kind == "conv":
        hw = s * s
        params = (27 * w + w) + d * 2 * (9 * w * w + w) + (w * N_CLASSES + N_CLASSES)
        flops = 2 * hw * (27 * w + d * 2 * 9 * w * w) + 2 * w * N_CLASSES
        activations = hw * w * (1 + 2 * d) + N_CLASSES
        inputs = 3 * hw
    elif spec.kind == "lstm":
        params = sum(4 * w * ((LSTM_FEATURES if i == 0 else w) + w) + 8 * w for i in range(d)) + w * N_CLASSES + N_CLASSES
        flops = s * sum(2 * 4 * w * ((LSTM_FEATURES if i == 0 else w) + w) for i in range(d)) + 2 * w * N_CLASSES
        activations = s * w * 2 * d + N_CLASSES  # h and c per step and layer
        inputs = s * LSTM_FEATURES
    else:  # attention
        per_block = (3 * w * w + 3 * w) + (w * w + w) + (4 * w * w + 4 * w) + (4 * w * w + w) + 4 * w
        params = d * per_block + w * N_CLASSES + N_CLASSES
        flops = d * (2 * s * w * (3 * w + w + 8 * w) + 2 * 2 * s * s * w) + 2 * w * N_CLASSES
        activations = d * (s * (3 * w + w + 4 * w + w) + s * s) + N_CLASSES
        inputs = s * w
    return {
        "flops": int(flops),
        "params": int(params),
        "bytes": int(FP32_BYTES * (params + inputs + 2 * activations)),
    }


def build(spec: CanonicalSpec) -> tuple[Any, Any]:
    """The seeded PyTorch module and an example input of batch 1."""
    import torch

    from follower.convert.blocks import STACKS

    torch.manual_seed(spec.seed)
    module = STACKS[spec.kind](spec.depth, spec.width, spec.input_size).eval()
    shape = [1, *spec.input_shape()[1:]]
    example = torch.randn(*shape, generator=torch.Generator().manual_seed(spec.seed + 1))
    return module, example


def generate(spec: CanonicalSpec, *, external_data: bool = False) -> tuple[bytes, dict[str, Any]]:
    """Build, export to ONNX and TorchScript, check both against PyTorch; the bundle bytes and its metadata."""
    from follower.convert.torch_export import to_onnx, to_torchscript

    module, example = build(spec)
    with tempfile.TemporaryDirectory(prefix="benchfleet-canon-") as tmp:
        onnx_path, ts_path = Path(tmp) / ONNX_MEMBER, Path(tmp) / TORCHSCRIPT_MEMBER
        onnx_check = to_onnx(module, example, onnx_path, external_data=external_data)
        ts_check = to_torchscript(module, example, ts_path)
        if external_data:
            # A bundle carries one self-contained graph; the external-data form is for files past 2 GiB on disk.
            import onnx

            onnx_bytes = onnx.load_model(str(onnx_path)).SerializeToString()
        else:
            onnx_bytes = onnx_path.read_bytes()
        ts_bytes = ts_path.read_bytes()
    meta = {
        "generator": "benchfleet.canonical",
        "spec": asdict(spec),
        "inputs": [{"name": "input", "datatype": "FP32", "shape": spec.input_shape()}],
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, N_CLASSES]}],
        "cost_per_inference": cost(spec),
        "checks": [onnx_check.as_dict(), ts_check.as_dict()],
    }
    return write_bundle({ONNX_MEMBER: onnx_bytes, TORCHSCRIPT_MEMBER: ts_bytes}, meta), meta


def local_model(bundle: bytes, meta: dict[str, Any], name: str, version: str = "1") -> ModelMeta:
    """The ModelMeta of a generated bundle served without a leader (tests and benches), as an upload would record it."""
    import hashlib
    from datetime import UTC, datetime

    return ModelMeta(
        name=name,
        version=version,
        format="bundle",
        inputs=[TensorSpec(**t) for t in meta["inputs"]],
        outputs=[TensorSpec(**t) for t in meta["outputs"]],
        sha256=hashlib.sha256(bundle).hexdigest(),
        size_bytes=len(bundle),
        created_at=datetime.now(UTC),
    )


def default_name(spec: CanonicalSpec) -> str:
    """A repository name such as canon-fc-d2-w64-s32."""
    return f"canon-{spec.kind}-d{spec.depth}-w{spec.width}-s{spec.input_size}"
