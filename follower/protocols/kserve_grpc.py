"""KServe v2 over gRPC (`inference.GRPCInferenceService`): ModelInfer with raw tensor contents, readiness from
ModelReady, the signature from ModelMetadata; the server's stage timings come back as int64 parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from common.formats.datatypes import raw_contents
from common.wire.models import TensorSpec
from follower.protocols.base import Endpoint, Entry, GrpcProtocol
from follower.protocols.calls import unary
from follower.protocols.transports import NO_CREDENTIALS, Credentials
from protos import grpc_predict_v2_pb2 as pb
from protos import kserve_v2


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

    def stages(self, answer: Any) -> Mapping[str, Any]:
        """The int64 parameters of a ModelInferResponse: our servers' stage timings in ns."""
        params = answer.parameters.items()
        return {k: v.int64_param for k, v in params if v.WhichOneof("parameter_choice") == "int64_param"}

    def prefix(self, endpoint: Endpoint) -> bytes:
        """The serialized model fields, prefixed to every body (a concatenation of messages is their merge)."""
        return pb.ModelInferRequest(model_name=endpoint.model, model_version=endpoint.version or "").SerializeToString()
