"""KServe v2 over gRPC (`inference.GRPCInferenceService`): ModelInfer with raw tensor contents, readiness from
ModelReady, the signature from ModelMetadata; the server's stage timings come back as int64 parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from common.formats.datatypes import V2_TO_NUMPY, from_raw_contents, raw_contents
from common.wire.models import TensorSpec
from follower.protocols.base import Endpoint, Entry, GrpcProtocol
from follower.protocols.calls import EndpointError, unary
from follower.protocols.transports import NO_CREDENTIALS, Credentials
from protos import grpc_predict_v2_pb2 as pb
from protos import kserve_v2

# The InferTensorContents field that carries each datatype's values when an answer has no raw contents.
_CONTENTS = {
    "BOOL": "bool_contents",
    **dict.fromkeys(("INT8", "INT16", "INT32"), "int_contents"),
    "INT64": "int64_contents",
    **dict.fromkeys(("UINT8", "UINT16", "UINT32"), "uint_contents"),
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


class KserveGrpc(GrpcProtocol):
    name = "kserve-grpc"
    method = kserve_v2.method_path("ModelInfer")
    answer_type = pb.ModelInferResponse

    def infer_url(self, endpoint: Endpoint) -> str:
        version = f"/versions/{endpoint.version}" if endpoint.version else ""
        return f"{endpoint.base}/{endpoint.model}{version}"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        request = pb.ModelReadyRequest(name=endpoint.model, version=endpoint.version or "")
        answer = unary(endpoint, kserve_v2.method_path("ModelReady"), request, pb.ModelReadyResponse, credentials)
        return bool(answer.ready)

    def signature(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> list[TensorSpec]:
        request = pb.ModelMetadataRequest(name=endpoint.model, version=endpoint.version or "")
        answer = unary(endpoint, kserve_v2.method_path("ModelMetadata"), request, pb.ModelMetadataResponse, credentials)
        return [TensorSpec(name=t.name, datatype=t.datatype, shape=list(t.shape)) for t in answer.inputs]

    def encode(self, entries: Sequence[Entry]) -> bytes:
        """A serialized ModelInferRequest (raw contents, no model: the transport prefixes it)."""
        request = pb.ModelInferRequest()
        for e in entries:
            tensor = request.inputs.add()
            tensor.name, tensor.datatype = str(e["name"]), str(e["datatype"])
            tensor.shape.extend(cast(list[int], e["shape"]))
            request.raw_input_contents.append(raw_contents(str(e["datatype"]), cast(list[object], e["data"])))
        return request.SerializeToString()

    def outputs(self, endpoint: Endpoint, body: bytes, credentials: Credentials = NO_CREDENTIALS) -> dict[str, np.ndarray]:
        request = pb.ModelInferRequest.FromString(self.prefix(endpoint) + body)
        answer = unary(endpoint, self.method, request, pb.ModelInferResponse, credentials)
        out = {}
        try:
            for i, t in enumerate(answer.outputs):
                shape = [int(d) for d in t.shape]
                if i < len(answer.raw_output_contents):
                    out[t.name] = from_raw_contents(t.datatype, answer.raw_output_contents[i], shape)
                else:  # typed contents: the field its datatype names
                    values = getattr(t.contents, _CONTENTS[t.datatype])
                    dtype = object if t.datatype == "BYTES" else V2_TO_NUMPY[t.datatype]
                    out[t.name] = np.asarray(list(values), dtype=dtype).reshape(shape)
        except (KeyError, ValueError) as exc:
            raise EndpointError(f"{endpoint.base}: ModelInfer: unexpected answer ({type(exc).__name__}: {exc})") from None
        return out

    def stages(self, answer: Any) -> Mapping[str, Any]:
        """The int64 parameters of a ModelInferResponse: our servers' stage timings in ns."""
        params = answer.parameters.items()
        return {k: v.int64_param for k, v in params if v.WhichOneof("parameter_choice") == "int64_param"}

    def prefix(self, endpoint: Endpoint) -> bytes:
        """The serialized model fields, prefixed to every body (a concatenation of messages is their merge)."""
        return pb.ModelInferRequest(model_name=endpoint.model, model_version=endpoint.version or "").SerializeToString()
