"""The pre-flight check: the model file on this follower matches its stored signature and the job's expectations.

It runs before any server starts, so a mismatch fails the attempt with a clear reason instead of a server that
rejects every request (or, worse, silently serves a different model).
"""

from __future__ import annotations

from pathlib import Path

from common.errors import InvalidSpec
from common.formats.bundle import ONNX_MEMBER, BundleError, read_member, read_meta
from common.formats.onnx_signature import read_signature
from common.formats.signature import input_mismatches
from common.spec.job import JobSpec
from common.wire.models import ModelMeta, TensorSpec


class SignatureMismatch(RuntimeError):
    """The model's input signature does not match the job spec (or its own stored metadata)."""


def _onnx_inputs(data: bytes) -> list[TensorSpec]:
    try:
        return read_signature(data)[0]
    except InvalidSpec as exc:
        raise SignatureMismatch(f"the model file: {exc}") from None


def file_inputs(model: ModelMeta, model_path: Path) -> list[TensorSpec] | None:
    """The inputs the file itself declares (ONNX graph, or a bundle's ONNX member); None for formats without one."""
    path = Path(model_path)
    if model.format == "onnx":
        return _onnx_inputs(path.read_bytes())
    if model.format == "bundle":
        data = path.read_bytes()
        try:
            inputs = _onnx_inputs(read_member(data, ONNX_MEMBER))
            declared = read_meta(data).get("inputs")
        except BundleError as exc:
            raise SignatureMismatch(f"model {model.ref}: {exc}") from None
        if declared is not None and input_mismatches(declared, inputs):
            raise SignatureMismatch(f"model {model.ref}: the bundle's meta.json disagrees with its ONNX graph")
        return inputs
    return None


def check_before_serving(spec: JobSpec, model: ModelMeta, model_path: Path) -> None:
    """Raise SignatureMismatch if the file, the stored metadata and the job's `inputs` do not agree."""
    actual = file_inputs(model, model_path)
    if actual is not None:
        problems = input_mismatches(model.inputs, actual)
        if problems:
            detail = "; ".join(problems)
            raise SignatureMismatch(f"model {model.ref}: the file's inputs differ from the stored signature: {detail}")
    if spec.inputs is not None:
        problems = input_mismatches(spec.inputs, model.inputs)
        if problems:
            raise SignatureMismatch(f"model {model.ref} does not match the job's inputs: {'; '.join(problems)}")
