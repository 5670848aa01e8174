"""TF Serving's gRPC API: PredictionService/Predict with tensor_content (string_val for strings) under the model spec
(serving_default; a version, or a version label when it is not a number), readiness from GetModelStatus (a version
AVAILABLE), the signature from GetModelMetadata. Its answers carry no server-side timings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from common.formats.datatypes import TF_TO_V2, V2_TO_NUMPY, V2_TO_TF, from_raw_contents, raw_contents
from common.wire.models import TensorSpec
from follower.protocols.base import Endpoint, Entry, GrpcProtocol
from follower.protocols.calls import EndpointError, unary
from follower.protocols.tfserving_rest import tf_tensor
from follower.protocols.transports import NO_CREDENTIALS, Credentials
from protos import tfserving_api
from protos import tfserving_pb2 as pb


class TfservingGrpc(GrpcProtocol):
    name = "tfserving-grpc"
    method = tfserving_api.method_path("Predict")
    answer_type = pb.PredictResponse

    def infer_url(self, endpoint: Endpoint) -> str:
        return f"{endpoint.base}/{endpoint.model_path()}"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        spec = tfserving_api.model_spec(endpoint.model, endpoint.version, signature=None)
        status = pb.GetModelStatusRequest(model_spec=spec)
        method = tfserving_api.method_path("GetModelStatus")
        answer = unary(endpoint, method, status, pb.GetModelStatusResponse, credentials)
        return any(v.state == pb.ModelVersionStatus.AVAILABLE for v in answer.model_version_status)

    def signature(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> list[TensorSpec]:
        spec = tfserving_api.model_spec(endpoint.model, endpoint.version, signature=None)
        asked = pb.GetModelMetadataRequest(model_spec=spec, metadata_field=["signature_def"])
        method = tfserving_api.method_path("GetModelMetadata")
        answer = unary(endpoint, method, asked, pb.GetModelMetadataResponse, credentials)
        try:
            signatures = pb.SignatureDefMap.FromString(answer.metadata["signature_def"].value).signature_def
            inputs = signatures[tfserving_api.DEFAULT_SIGNATURE].inputs
            return [
                tf_tensor(key, pb.DataType.Name(t.dtype), [int(d.size) for d in t.tensor_shape.dim])
                for key, t in sorted(inputs.items())
            ]
        except (KeyError, ValueError) as exc:
            what = f"{type(exc).__name__}: {exc}"
            raise EndpointError(f"{endpoint.base}: GetModelMetadata: unexpected metadata ({what})") from None

    def encode(self, entries: Sequence[Entry]) -> bytes:
        """A serialized PredictRequest (no model_spec: the transport prefixes it): numeric tensors as tensor_content
        (little-endian values, row major), strings as string_val."""
        request = pb.PredictRequest()
        for e in entries:
            datatype = str(e["datatype"])
            if datatype not in V2_TO_TF:
                raise ValueError(f"input {e['name']!r}: {datatype} has no TensorFlow dtype")
            tensor = request.inputs[str(e["name"])]
            tensor.dtype = pb.DataType.Value(V2_TO_TF[datatype])  # type: ignore[assignment]
            tensor.tensor_shape.dim.extend(pb.TensorShapeProto.Dim(size=int(d)) for d in cast(list[int], e["shape"]))
            data = cast(list[object], e["data"])
            if datatype == "BYTES":
                tensor.string_val.extend(v if isinstance(v, bytes) else str(v).encode() for v in data)
            else:
                tensor.tensor_content = raw_contents(datatype, data)
        return request.SerializeToString()

    def outputs(self, endpoint: Endpoint, body: bytes, credentials: Credentials = NO_CREDENTIALS) -> dict[str, np.ndarray]:
        request = pb.PredictRequest.FromString(self.prefix(endpoint) + body)
        answer = unary(endpoint, self.method, request, pb.PredictResponse, credentials)
        try:
            return {name: _tensor(t) for name, t in sorted(answer.outputs.items())}
        except (KeyError, ValueError) as exc:
            raise EndpointError(f"{endpoint.base}: Predict: unexpected answer ({type(exc).__name__}: {exc})") from None

    def prefix(self, endpoint: Endpoint) -> bytes:
        """The serialized model spec, prefixed to every body (a concatenation of messages is their merge)."""
        spec = tfserving_api.model_spec(endpoint.model, endpoint.version)
        return pb.PredictRequest(model_spec=spec).SerializeToString()


# The TensorProto field that carries each dtype's values when a tensor has no tensor_content.
_VALUES = {
    "DT_FLOAT": "float_val",
    "DT_DOUBLE": "double_val",
    **dict.fromkeys(("DT_INT8", "DT_INT16", "DT_INT32", "DT_UINT8", "DT_UINT16"), "int_val"),
    "DT_INT64": "int64_val",
    "DT_UINT32": "uint32_val",
    "DT_UINT64": "uint64_val",
    "DT_BOOL": "bool_val",
    "DT_STRING": "string_val",
}


def _tensor(t: pb.TensorProto) -> np.ndarray:
    """A TensorProto's values: its tensor_content, or its typed values (one value filling the whole shape, as
    TensorFlow reads it); DT_HALF's typed values are float16 bit patterns."""
    dtype = pb.DataType.Name(t.dtype)
    datatype = TF_TO_V2[dtype]
    shape = [int(d.size) for d in t.tensor_shape.dim]
    if t.tensor_content:
        return from_raw_contents(datatype, t.tensor_content, shape)
    if dtype == "DT_HALF":
        values = np.asarray(list(t.half_val), dtype=np.uint16).view(np.float16)
    else:
        values = np.asarray(list(getattr(t, _VALUES[dtype])), dtype=object if datatype == "BYTES" else V2_TO_NUMPY[datatype])
    size = int(np.prod(shape)) if shape else 1
    if len(values) == 1 and size > 1:
        return np.full(shape, values[0], dtype=values.dtype)
    return values.reshape(shape)
