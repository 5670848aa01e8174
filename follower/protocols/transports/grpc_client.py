"""The load generator's gRPC transport: one unary RPC per request over grpc.aio (KServe v2 ModelInfer, TF Serving's
PredictionService.Predict: the protocol that opens it says which, follower/protocols/).

Request bodies are serialized request messages built once before the run without the model; the transport prefixes
the serialized model fields its protocol gives (KServe: model_name and model_version; TF Serving: the model_spec), and
protobuf merges concatenated messages, so sending costs no per-request encoding. For a unary call the response arrives
whole: first byte = done = response received, the same four timestamps as HTTP.

This is our own client rather than tritonclient.grpc on purpose: one code path for our servers and Triton (both speak
the standard `inference.GRPCInferenceService`), and bodies serialized once instead of per call (tritonclient builds
and serializes a request per call). tritonclient.grpc can be imported beside our stubs (their package is ours, see
protos/grpc_predict_v2.proto) and is used where per-call cost does not matter: checking answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from follower.protocols.transports.base import NO_CREDENTIALS, Answer, Credentials, Transport

# gRPC status → the HTTP-like status the records keep (200 = answered; transport failures raise instead).
_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
}
# An answer's server-side stage timings (ns), for a protocol whose answers carry them.
Stages = Callable[[Any], Mapping[str, Any] | None]


def _identity(data: bytes) -> bytes:
    return data


class GrpcTransport(Transport):
    """One unary RPC (`method`, answered by `answer_type`) per request over one grpc.aio channel to `address`; a unary
    answer arrives whole (first byte = done)."""

    def __init__(
        self,
        address: str,
        *,
        tls: bool,
        method: str,
        answer_type: Any,
        prefix: bytes,
        stages: Stages | None,
        max_concurrency: int,
        timeout_s: float,
        credentials: Credentials = NO_CREDENTIALS,
    ) -> None:
        scheme = "grpcs" if tls else "grpc"
        super().__init__(
            f"{scheme}://{address}{method}", max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials
        )
        target, pinned = credentials.grpc_channel(address)
        options = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20), *pinned]
        if tls:
            if not credentials.verify:
                raise ValueError("gRPC over TLS always checks the certificate: give its CA in target.ca_bundle instead")
            roots = credentials.ca_pem.encode() if credentials.ca_pem else None
            self.channel = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(roots), options=options)
        else:
            self.channel = grpc.aio.insecure_channel(target, options=options)
        # gRPC metadata keys are lower case; a secret's header travels as one.
        self.metadata = tuple((name.lower(), value) for name, value in credentials.headers) or None
        self.stages = stages
        self.stub = self.channel.unary_unary(method, request_serializer=_identity, response_deserializer=answer_type.FromString)
        self.prefix = prefix

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
        return Answer(200, now, now, self.stages(response) if self.stages is not None else None)

    async def close(self) -> None:
        await self.channel.close()
