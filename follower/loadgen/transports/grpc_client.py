"""The load generator's gRPC transport: KServe v2 ModelInfer, or TF Serving's PredictionService.Predict, over grpc.aio.

A gRPC target is written `grpc://HOST:PORT/MODEL[/versions/V]`, with `?api=tfserving` for TF Serving (grpcs:// for
TLS). Request bodies are serialized request messages built once before the run (follower.loadgen.bodies, wire "grpc":
ModelInferRequest, "tfserving-grpc": PredictRequest) without the model; the transport prefixes the serialized model
fields (KServe: model_name and model_version; TF Serving: the model_spec), and protobuf merges concatenated messages,
so sending costs no per-request encoding. For a unary call the response arrives whole: first byte = done = response
received, the same four timestamps as HTTP.

This is our own client rather than tritonclient.grpc on purpose: one code path for our servers and Triton (both speak
the standard `inference.GRPCInferenceService`), and bodies serialized once instead of per call (tritonclient builds
and serializes a request per call). tritonclient.grpc can be imported beside our stubs (their package is ours, see
protos/grpc_predict_v2.proto) and is used where per-call cost does not matter: checking answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import grpc

from follower.loadgen.transports.base import NO_CREDENTIALS, Answer, Credentials, Transport
from protos import grpc_predict_v2_pb2 as pb
from protos import kserve_v2, tfserving_api
from protos import tfserving_pb2 as tf_pb

SCHEME = "grpc://"
APIS = ("kserve", "tfserving")
# gRPC status → the HTTP-like status the records keep (200 = answered; transport failures raise instead).
_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
}


def grpc_url(host: str, port: int, model: str) -> str:
    """The target string of a model on a KServe v2 gRPC server."""
    return f"{SCHEME}{host}:{port}/{model}"


@dataclass(frozen=True)
class GrpcTarget:
    """A parsed gRPC target: where, which service, which model (and version: None for the server's default)."""

    address: str
    model: str
    version: str | None = None
    api: str = "kserve"


def parse_grpc_url(url: str) -> GrpcTarget:
    """The parts of a grpc[s]://HOST:PORT/MODEL[/versions/V][?api=kserve|tfserving] target."""
    parts = urlsplit(url)
    path = [unquote(p) for p in parts.path.strip("/").split("/")] if parts.path.strip("/") else []
    api = parse_qs(parts.query).get("api", ["kserve"])[-1]
    if (parts.scheme not in ("grpc", "grpcs") or not parts.netloc or len(path) not in (1, 3)
            or (len(path) == 3 and path[1] != "versions") or api not in APIS):  # fmt: skip
        raise ValueError(f"not a gRPC model target (grpc[s]://HOST:PORT/MODEL[/versions/V][?api=tfserving]): {url!r}")
    return GrpcTarget(parts.netloc, path[0], path[2] if len(path) == 3 else None, api)


def model_prefix(target: GrpcTarget) -> bytes:
    """The serialized model fields, prefixed to every body (a concatenation of messages is their merge)."""
    if target.api == "tfserving":
        return tf_pb.PredictRequest(model_spec=tfserving_api.model_spec(target.model, target.version)).SerializeToString()
    return pb.ModelInferRequest(model_name=target.model, model_version=target.version or "").SerializeToString()


def _identity(data: bytes) -> bytes:
    return data


class GrpcTransport(Transport):
    """KServe v2 ModelInfer or TF Serving Predict over one grpc.aio channel; a unary answer arrives whole (first byte =
    done)."""

    def __init__(self, url: str, *, max_concurrency: int, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
        super().__init__(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
        target = parse_grpc_url(url)
        address = target.address
        options = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]
        if url.startswith("grpcs://"):
            if not credentials.verify:
                raise ValueError("gRPC over TLS always checks the certificate: give its CA in target.ca_bundle instead")
            roots = credentials.ca_pem.encode() if credentials.ca_pem else None
            self.channel = grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(roots), options=options)
        else:
            self.channel = grpc.aio.insecure_channel(address, options=options)
        # gRPC metadata keys are lower case; a secret's header travels as one.
        self.metadata = tuple((name.lower(), value) for name, value in credentials.headers) or None
        answer_type: Any = tf_pb.PredictResponse if target.api == "tfserving" else pb.ModelInferResponse
        method = tfserving_api.method_path("Predict") if target.api == "tfserving" else kserve_v2.method_path("ModelInfer")
        self.tfserving = target.api == "tfserving"
        self.stub = self.channel.unary_unary(method, request_serializer=_identity, response_deserializer=answer_type.FromString)
        self.prefix = model_prefix(target)

    def encode(self, body: bytes) -> bytes:
        return self.prefix + body

    async def request(self, encoded: Any) -> Answer:
        try:
            response = await self.stub(encoded, timeout=self.timeout_s, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise TimeoutError(f"gRPC deadline of {self.timeout_s:g}s exceeded") from None
            if code == grpc.StatusCode.UNAVAILABLE and "connect" in (exc.details() or "").lower():
                raise ConnectionError(f"gRPC UNAVAILABLE: {exc.details()}") from None
            now = time.monotonic_ns()
            return Answer(_STATUS.get(code, 500), now, now, None, f"gRPC {code.name}: {exc.details()}")
        now = time.monotonic_ns()
        if self.tfserving:
            return Answer(200, now, now, None)  # TF Serving reports no server-side timings in its answer
        params = {k: v.int64_param for k, v in response.parameters.items() if v.WhichOneof("parameter_choice") == "int64_param"}
        return Answer(200, now, now, params)

    async def close(self) -> None:
        await self.channel.close()
