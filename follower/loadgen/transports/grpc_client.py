"""The load generator's gRPC transport: KServe v2 ModelInfer over grpc.aio.

A gRPC target is written `grpc://HOST:PORT/MODEL`. Request bodies are serialized ModelInferRequest messages built once
before the run (follower.loadgen.bodies, wire "grpc") without the model name; the transport prefixes the serialized
`model_name` field (protobuf merges concatenated messages), so sending costs no per-request encoding. For a unary
call the response arrives whole: first byte = done = response received, the same four timestamps as HTTP.

This is our own client rather than tritonclient.grpc on purpose: one code path for our servers and Triton (both speak
the standard `inference.GRPCInferenceService`), and bodies serialized once instead of per call (tritonclient builds
and serializes a request per call). tritonclient.grpc can be imported beside our stubs (their package is ours, see
protos/grpc_predict_v2.proto) and is used where per-call cost does not matter: checking answers.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import grpc

from follower.loadgen.transports.base import NO_CREDENTIALS, Answer, Credentials, Transport
from protos import grpc_predict_v2_pb2 as pb
from protos import kserve_v2

SCHEME = "grpc://"
INFER_METHOD = kserve_v2.method_path("ModelInfer")
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


def parse_grpc_url(url: str) -> tuple[str, str]:
    """(host:port, model name) of a grpc:// (or TLS grpcs://) target."""
    parts = urlsplit(url)
    if parts.scheme not in ("grpc", "grpcs") or not parts.netloc or not parts.path.strip("/"):
        raise ValueError(f"not a gRPC model target (grpc[s]://HOST:PORT/MODEL): {url!r}")
    return parts.netloc, parts.path.strip("/")


def model_prefix(model: str) -> bytes:
    """The serialized model_name field, prefixed to every body (a concatenation of messages is their merge)."""
    return pb.ModelInferRequest(model_name=model).SerializeToString()


def _identity(data: bytes) -> bytes:
    return data


class GrpcTransport(Transport):
    """KServe v2 ModelInfer over one grpc.aio channel; a unary answer arrives whole (first byte = done)."""

    def __init__(self, url: str, *, max_concurrency: int, timeout_s: float, credentials: Credentials = NO_CREDENTIALS) -> None:
        super().__init__(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
        address, model = parse_grpc_url(url)
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
        self.stub = self.channel.unary_unary(INFER_METHOD, request_serializer=_identity,
                                             response_deserializer=pb.ModelInferResponse.FromString)  # fmt: skip
        self.prefix = model_prefix(model)

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
        params = {k: v.int64_param for k, v in response.parameters.items() if v.WhichOneof("parameter_choice") == "int64_param"}
        return Answer(200, now, now, params)

    async def close(self) -> None:
        await self.channel.close()
