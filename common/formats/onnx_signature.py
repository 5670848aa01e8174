"""The KServe v2 signature of an ONNX model, read from its bytes: parse and check only, never run anything."""

from __future__ import annotations

from pydantic import ValidationError

from common.errors import InvalidSpec, field_errors
from common.formats.datatypes import ONNX_TO_V2
from common.wire.models import TensorSpec


def _tensor_spec(value: object) -> TensorSpec:
    import onnx

    assert isinstance(value, onnx.ValueInfoProto)
    if value.type.WhichOneof("value") != "tensor_type":
        raise InvalidSpec(f"model value {value.name!r} is not a tensor", field="file")
    tensor = value.type.tensor_type
    datatype = ONNX_TO_V2.get(tensor.elem_type)
    if datatype is None:
        name = onnx.TensorProto.DataType.Name(tensor.elem_type) if tensor.elem_type else "UNDEFINED"
        raise InvalidSpec(f"model value {value.name!r} has unsupported element type {name}", field="file")
    # A symbolic or absent dimension (dim_param, or nothing) is dynamic: -1, as KServe writes it.
    shape = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in tensor.shape.dim]
    try:
        return TensorSpec(name=value.name, datatype=datatype, shape=shape)
    except ValidationError as exc:  # a bound of the wire (the values a request may hold, the name's length)
        raise InvalidSpec(f"model value {value.name[:64]!r}: {field_errors(exc)[0]['message']}", field="file") from None


def read_signature(data: bytes) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The (inputs, outputs) of an ONNX model; InvalidSpec naming `file` if the bytes are not a usable model."""
    import onnx  # heavy; only where a model is read

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
