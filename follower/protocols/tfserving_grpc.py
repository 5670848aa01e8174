"""TF Serving's gRPC API: PredictionService/Predict with tensor_content (string_val for strings) under the model spec
(serving_default; a version, or a version label when it is not a number), readiness from GetModelStatus (a version
AVAILABLE), the signature from GetModelMetadata. Its answers carry no server-side timings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from common.formats.datatypes import V2_TO_TF, raw_contents
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

    def prefix(self, endpoint: Endpoint) -> bytes:
        """The serialized model spec, prefixed to every body (a concatenation of messages is their merge)."""
        spec = tfserving_api.model_spec(endpoint.model, endpoint.version)
        return pb.PredictRequest(model_spec=spec).SerializeToString()
