"""Read a model's signature from ONNX bytes: parse only, never run anything."""

from __future__ import annotations

import json

import onnx
from pydantic import ValidationError

from common.bundle import ONNX_MEMBER, BundleError, read_member
from common.errors import InvalidSpec
from common.models import Datatype, TensorSpec

# ONNX TensorProto element types → KServe v2 datatypes; anything else is refused, not guessed.
ONNX_TO_KSERVE: dict[int, Datatype] = {
    onnx.TensorProto.BOOL: "BOOL",
    onnx.TensorProto.UINT8: "UINT8",
    onnx.TensorProto.UINT16: "UINT16",
    onnx.TensorProto.UINT32: "UINT32",
    onnx.TensorProto.UINT64: "UINT64",
    onnx.TensorProto.INT8: "INT8",
    onnx.TensorProto.INT16: "INT16",
    onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64",
    onnx.TensorProto.FLOAT16: "FP16",
    onnx.TensorProto.FLOAT: "FP32",
    onnx.TensorProto.DOUBLE: "FP64",
    onnx.TensorProto.STRING: "BYTES",
}


def _tensor_spec(value: onnx.ValueInfoProto) -> TensorSpec:
    if value.type.WhichOneof("value") != "tensor_type":
        raise InvalidSpec(f"model value {value.name!r} is not a tensor", field="file")
    tensor = value.type.tensor_type
    datatype = ONNX_TO_KSERVE.get(tensor.elem_type)
    if datatype is None:
        name = onnx.TensorProto.DataType.Name(tensor.elem_type) if tensor.elem_type else "UNDEFINED"
        raise InvalidSpec(f"model value {value.name!r} has unsupported element type {name}", field="file")
    # A symbolic or absent dimension (dim_param, or nothing) is dynamic: -1, as KServe writes it.
    shape = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in tensor.shape.dim]
    return TensorSpec(name=value.name, datatype=datatype, shape=shape)


def read_signature(data: bytes) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The (inputs, outputs) of an ONNX model; InvalidSpec naming `file` if the bytes are not a usable model."""
    try:
        model = onnx.load_model_from_string(data)
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - untrusted bytes: whatever the parser or checker raises means "not a model"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidSpec(f"not a valid ONNX model: {reason}", field="file") from None
    graph = model.graph
    # Older exporters list initializers (weights) among the graph inputs; they are not fed by a client.
    weights = {init.name for init in graph.initializer}
    inputs = [_tensor_spec(v) for v in graph.input if v.name not in weights]
    outputs = [_tensor_spec(v) for v in graph.output]
    if not inputs or not outputs:
        raise InvalidSpec("not a valid ONNX model: it needs at least one input and one output", field="file")
    return inputs, outputs


def model_signature(model_format: str, data: bytes, declared: str | None) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The signature of an upload: parsed from ONNX (plain or a bundle's member), else the declared JSON.

    TorchScript and SavedModel files are never opened on the leader (loading them can run code), so their signature
    comes from the `signature` form field: {"inputs": [...], "outputs": [...]} in ModelMeta form.
    """
    if model_format == "onnx":
        return read_signature(data)
    if model_format == "bundle":
        try:
            return read_signature(read_member(data, ONNX_MEMBER))
        except BundleError as exc:
            raise InvalidSpec(str(exc), field="file") from None
    if not declared:
        raise InvalidSpec(f"a {model_format} upload needs its signature declared (inputs and outputs)", field="signature")
    try:
        doc = json.loads(declared)
        inputs = [TensorSpec.model_validate(t) for t in doc["inputs"]]
        outputs = [TensorSpec.model_validate(t) for t in doc["outputs"]]
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidSpec(f"must be JSON {{'inputs': [...], 'outputs': [...]}}: {reason}", field="signature") from None
    if not inputs or not outputs:
        raise InvalidSpec("needs at least one input and one output", field="signature")
    return inputs, outputs
