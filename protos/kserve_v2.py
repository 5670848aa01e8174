"""KServe v2 gRPC under its standard service name, `inference.GRPCInferenceService`, with our generated messages.

grpc_predict_v2.proto declares the standard messages and service in our own package (see the comment at its top: so
that tritonclient.grpc can be imported beside it), so its generated `_pb2_grpc` paths carry that package. This module
is the one place that maps the service to the standard method paths, for serving (`add_to_server`) and for calling
(`Stub`); anything that speaks KServe v2 (tritonclient, KServe's clients, Triton) sees the standard protocol.
"""

from __future__ import annotations

from typing import Any

import grpc

from protos import grpc_predict_v2_pb2 as pb
from protos import grpc_predict_v2_pb2_grpc as pb_grpc

SERVICE = "inference.GRPCInferenceService"

# RPC name → (request type, response type): every unary RPC of the standard service that grpc_predict_v2.proto has.
METHODS: dict[str, tuple[Any, Any]] = {
    "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
    "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
    "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
}


def method_path(name: str) -> str:
    """The standard wire path of an RPC, e.g. /inference.GRPCInferenceService/ModelInfer."""
    return f"/{SERVICE}/{name}"


def add_to_server(servicer: pb_grpc.GRPCInferenceServiceServicer, server: Any) -> None:
    """Register `servicer`'s RPCs on `server` (grpc or grpc.aio) under the standard service name."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), request_deserializer=request.FromString, response_serializer=response.SerializeToString
        )
        for name, (request, response) in METHODS.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


class Stub:
    """A client of the standard service on `channel` (grpc or grpc.aio): one attribute per RPC, as generated stubs have."""

    def __init__(self, channel: Any) -> None:
        for name, (request, response) in METHODS.items():
            call = channel.unary_unary(
                method_path(name), request_serializer=request.SerializeToString, response_deserializer=response.FromString
            )
            setattr(self, name, call)
