"""TensorFlow Serving's gRPC services under their standard names, with our generated messages (protos/tfserving.proto,
whose package is ours: see its top). The one place that maps TF Serving's RPCs to their wire paths, for calling
(`method_path`) and for serving them (`add_to_server`, used by the test stand-in of a tensorflow_model_server).
"""

from __future__ import annotations

from typing import Any

import grpc

from protos import tfserving_pb2 as pb

PREDICTION = "tensorflow.serving.PredictionService"
MODEL = "tensorflow.serving.ModelService"
DEFAULT_SIGNATURE = "serving_default"  # tf.saved_model's DEFAULT_SERVING_SIGNATURE_DEF_KEY

# RPC name → (service, request type, response type).
METHODS: dict[str, tuple[str, Any, Any]] = {
    "Predict": (PREDICTION, pb.PredictRequest, pb.PredictResponse),
    "GetModelMetadata": (PREDICTION, pb.GetModelMetadataRequest, pb.GetModelMetadataResponse),
    "GetModelStatus": (MODEL, pb.GetModelStatusRequest, pb.GetModelStatusResponse),
}


def method_path(name: str) -> str:
    """The standard wire path of an RPC, e.g. /tensorflow.serving.PredictionService/Predict."""
    return f"/{METHODS[name][0]}/{name}"


def model_spec(name: str, version: str | None, *, signature: str | None = DEFAULT_SIGNATURE) -> pb.ModelSpec:
    """Which model (and version: a number is a version, anything else a version label) and signature to run."""
    spec = pb.ModelSpec(name=name)
    if signature:
        spec.signature_name = signature
    if version is not None and version.isdigit():
        spec.version.value = int(version)
    elif version is not None:
        spec.version_label = version
    return spec


def add_to_server(servicer: Any, server: Any) -> None:
    """Register `servicer`'s methods (one per RPC in METHODS that it has) on `server` (grpc or grpc.aio)."""
    by_service: dict[str, dict[str, Any]] = {}
    for name, (service, request, response) in METHODS.items():
        if hasattr(servicer, name):
            by_service.setdefault(service, {})[name] = grpc.unary_unary_rpc_method_handler(
                getattr(servicer, name), request_deserializer=request.FromString,
                response_serializer=response.SerializeToString)  # fmt: skip
    server.add_generic_rpc_handlers(tuple(grpc.method_handlers_generic_handler(s, h) for s, h in by_service.items()))
