"""A stand-in for a tensorflow_model_server's gRPC API (no TF Serving binary can be installed here): TF Serving's
PredictionService (Predict, GetModelMetadata) and ModelService (GetModelStatus) over gRPC, for one model, computed by
ONNX Runtime from an ONNX file. It answers as TF Serving does and is strict where TF Serving is: an unknown model is
NOT_FOUND, a signature other than serving_default, a version it does not serve, a wrong dtype or shape, or a
tensor_content of the wrong length is INVALID_ARGUMENT; with a key file, a call without `x-api-key` metadata holding
the key is UNAUTHENTICATED, as behind a team's gRPC ingress. Its messages are protos/tfserving.proto's, whose field
numbers tests/unit/follower/test_tfserving_wire.py checks byte for byte against TF Serving's own.

    python -m tests.e2e.tfserving_standin --port P --model FILE.onnx --name NAME --version 3 [--key-file FILE]
"""

from __future__ import annotations

import argparse
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnxruntime as ort

from common.formats.datatypes import ORT_TO_V2, V2_TO_NUMPY, V2_TO_TF
from protos import tfserving_api
from protos import tfserving_pb2 as pb


class StandIn:
    """The model's one version behind TF Serving's RPCs."""

    def __init__(self, model: Path, name: str, version: int, key: str | None) -> None:
        self.session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        self.name, self.version, self.key = name, version, key
        self.inputs = {i.name: (ORT_TO_V2[i.type], i.shape) for i in self.session.get_inputs()}
        self.outputs = {o.name: ORT_TO_V2[o.type] for o in self.session.get_outputs()}

    def _check(self, spec: pb.ModelSpec, context: Any, *, signature: bool) -> None:
        if self.key is not None and dict(context.invocation_metadata()).get("x-api-key") != self.key:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong API key")
        if spec.name != self.name:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Servable not found for request: Latest({spec.name})")
        if spec.HasField("version") and spec.version.value != self.version:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"version {spec.version.value} is not served")
        if signature and spec.signature_name not in ("", tfserving_api.DEFAULT_SIGNATURE):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Serving signature name: \"{spec.signature_name}\" not found")

    def _shape(self, shape: list[Any]) -> pb.TensorShapeProto:
        return pb.TensorShapeProto(dim=[pb.TensorShapeProto.Dim(size=d if isinstance(d, int) else -1) for d in shape])

    def GetModelStatus(self, request: pb.GetModelStatusRequest, context: Any) -> pb.GetModelStatusResponse:
        self._check(request.model_spec, context, signature=False)
        status = pb.ModelVersionStatus(version=self.version, state=pb.ModelVersionStatus.AVAILABLE)
        return pb.GetModelStatusResponse(model_version_status=[status])

    def GetModelMetadata(self, request: pb.GetModelMetadataRequest, context: Any) -> pb.GetModelMetadataResponse:
        self._check(request.model_spec, context, signature=False)
        if list(request.metadata_field) != ["signature_def"]:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Metadata field signature_def is the one supported")
        signature = pb.SignatureDef(method_name="tensorflow/serving/predict")
        for name, (datatype, shape) in self.inputs.items():
            signature.inputs[name].CopyFrom(pb.TensorInfo(name=f"{name}:0", dtype=V2_TO_TF[datatype],
                                                          tensor_shape=self._shape(shape)))  # fmt: skip
        for name, datatype in self.outputs.items():
            signature.outputs[name].CopyFrom(pb.TensorInfo(name=f"{name}:0", dtype=V2_TO_TF[datatype]))
        answer = pb.GetModelMetadataResponse(model_spec=pb.ModelSpec(name=self.name))
        answer.model_spec.version.value = self.version
        answer.metadata["signature_def"].Pack(pb.SignatureDefMap(signature_def={tfserving_api.DEFAULT_SIGNATURE: signature}))
        return answer

    def Predict(self, request: pb.PredictRequest, context: Any) -> pb.PredictResponse:
        self._check(request.model_spec, context, signature=True)
        if set(request.inputs) != set(self.inputs):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"inputs {sorted(request.inputs)}, expected {sorted(self.inputs)}")
        feed = {}
        for name, tensor in request.inputs.items():
            datatype, shape = self.inputs[name]
            if tensor.dtype != pb.DataType.Value(V2_TO_TF[datatype]):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"input {name}: dtype {pb.DataType.Name(tensor.dtype)}")
            dims = [d.size for d in tensor.tensor_shape.dim]
            dtype = V2_TO_NUMPY[datatype].newbyteorder("<")
            if len(dims) != len(shape) or len(tensor.tensor_content) != int(np.prod(dims)) * dtype.itemsize:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"input {name}: {dims}, {len(tensor.tensor_content)} bytes")
            feed[name] = np.frombuffer(tensor.tensor_content, dtype=dtype).reshape(dims)
        answer = pb.PredictResponse(model_spec=pb.ModelSpec(name=self.name, signature_name=tfserving_api.DEFAULT_SIGNATURE))
        answer.model_spec.version.value = self.version
        for (name, datatype), value in zip(self.outputs.items(), self.session.run(None, feed), strict=True):
            out = answer.outputs[name]
            out.dtype = pb.DataType.Value(V2_TO_TF[datatype])  # type: ignore[assignment]
            out.tensor_shape.CopyFrom(self._shape(list(value.shape)))
            out.tensor_content = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
        return answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--key-file", type=Path)  # not argv: a key in argv shows in `ps`
    args = parser.parse_args()
    key = args.key_file.read_text().strip() if args.key_file else None
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    tfserving_api.add_to_server(StandIn(args.model, args.name, args.version, key), server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
