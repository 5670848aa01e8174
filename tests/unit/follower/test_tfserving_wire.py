"""TF Serving's gRPC wire, byte for byte: protos/tfserving.proto is our own subset of TF Serving's and TensorFlow's
protos, so what it writes is checked here against bytes built by hand from the upstream field numbers
(tensorflow_serving/apis/model.proto: ModelSpec name 1, version 2 (Int64Value), signature_name 3, version_label 4;
predict.proto: PredictRequest model_spec 1, inputs 2; tensor.proto: dtype 1, tensor_shape 2, tensor_content 4,
string_val 8; tensor_shape.proto: dim 2, Dim.size 1; types.proto: DT_FLOAT 1, DT_INT64 9, DT_STRING 7;
meta_graph.proto: TensorInfo name 1, dtype 2, tensor_shape 3; SignatureDef inputs 1), not against itself."""

from __future__ import annotations

import struct

from follower.protocols import PROTOCOLS, Endpoint
from protos import tfserving_pb2 as pb


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2) of a small message: tag, one-byte length, payload."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def varint(number: int, value: int) -> bytes:
    assert value < 128
    return bytes([number << 3, value])


TFSERVING = PROTOCOLS["tfserving-grpc"]
KSERVE = PROTOCOLS["kserve-grpc"]


def prefix(protocol: object, version: str | None) -> bytes:
    return protocol.prefix(Endpoint(protocol.name, "grpc://h:1", "mlp", version))  # type: ignore[attr-defined]


def test_the_model_spec_prefix_is_tf_servings_model_spec() -> None:
    spec = field(1, b"mlp") + field(2, varint(1, 3)) + field(3, b"serving_default")
    assert prefix(TFSERVING, "3") == field(1, spec)
    labelled = field(1, b"mlp") + field(3, b"serving_default") + field(4, b"canary")
    assert prefix(TFSERVING, "canary") == field(1, labelled)
    # KServe's ModelInferRequest: model_name 1, model_version 2.
    assert prefix(KSERVE, "2") == field(1, b"mlp") + field(2, b"2")


def test_a_body_is_a_predict_request_with_tensor_content_and_string_val() -> None:
    body = TFSERVING.encode(
        [
            {"name": "input", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]},
            {"name": "ids", "shape": [1], "datatype": "INT64", "data": [7]},
            {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]},
        ]
    )
    shape = field(2, varint(1, 1)) + field(2, varint(1, 2))
    fp32 = varint(1, 1) + field(2, shape) + field(4, struct.pack("<2f", 1.0, 2.0))
    int64 = varint(1, 9) + field(2, field(2, varint(1, 1))) + field(4, struct.pack("<q", 7))
    text = varint(1, 7) + field(2, field(2, varint(1, 1))) + field(8, b"hi")
    entries = {
        field(2, field(1, b"input") + field(2, fp32)),
        field(2, field(1, b"ids") + field(2, int64)),
        field(2, field(1, b"text") + field(2, text)),
    }
    assert len(body) == sum(map(len, entries)) and all(entry in body for entry in entries)  # map order is not fixed
    # With the prefix, one PredictRequest: the concatenation is the merge.
    request = pb.PredictRequest.FromString(prefix(TFSERVING, None) + body)
    assert request.model_spec.name == "mlp" and not request.model_spec.HasField("version")
    assert request.model_spec.signature_name == "serving_default" and sorted(request.inputs) == ["ids", "input", "text"]


def test_a_signature_reads_tf_servings_tensor_info() -> None:
    info = field(1, b"x:0") + varint(2, 1) + field(3, field(2, bytes([8, 0x7F])) + field(2, varint(1, 16)))
    signature = pb.SignatureDef.FromString(field(1, field(1, b"x") + field(2, info)))
    tensor = signature.inputs["x"]
    assert tensor.name == "x:0" and pb.DataType.Name(tensor.dtype) == "DT_FLOAT"
    assert [d.size for d in tensor.tensor_shape.dim] == [127, 16]
