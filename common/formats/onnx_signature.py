"""The KServe v2 signature of an ONNX model, read from its bytes: parse and check only, never run anything."""

from __future__ import annotations

from typing import BinaryIO

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


# A model's top level is a handful of fields (its graph, opsets, metadata); a file of more is not a model, and walking
# it field by field must stay cheap.
MAX_TOP_FIELDS = 100_000


def _varint(stream: BinaryIO) -> int | None:
    """A protobuf varint read from `stream`; None at its end or past ten bytes."""
    value = 0
    for shift in range(0, 70, 7):
        byte = stream.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
    return None


def check_layout(stream: BinaryIO) -> None:
    """InvalidSpec naming `file` unless the stream's top level is an ONNX ModelProto's: known fields, each of its wire
    type, lengths inside the file, a graph among them. Walked from the file (lengths are skipped, not read), so junk of
    any size is refused without holding it in memory; only a well-formed model is then parsed whole (read_signature)."""
    import onnx

    wire = {
        f.number: 2 if f.type in (f.TYPE_STRING, f.TYPE_MESSAGE, f.TYPE_BYTES) else 0 for f in onnx.ModelProto.DESCRIPTOR.fields
    }
    size = stream.seek(0, 2)
    stream.seek(0)
    graph, fields = False, 0
    while (at := stream.tell()) < size:
        fields += 1
        tag = _varint(stream)
        if fields > MAX_TOP_FIELDS or tag is None or wire.get(tag >> 3) != tag & 7:
            raise InvalidSpec(f"not a valid ONNX model: byte {at:,} does not start a field of a model", field="file")
        length = _varint(stream) if tag & 7 == 2 else (0 if _varint(stream) is not None else None)
        if length is None or stream.tell() + length > size:
            raise InvalidSpec(f"not a valid ONNX model: the field at byte {at:,} runs past the file's end", field="file")
        stream.seek(length, 1)
        graph = graph or tag >> 3 == 7
    if not graph:
        raise InvalidSpec("not a valid ONNX model: it has no graph", field="file")


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
