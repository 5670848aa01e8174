"""The load generator's gRPC path: KServe v2 ModelInfer over grpc.aio, behind the same `session.post` seam as HTTP.

A gRPC target is written `grpc://HOST:PORT/MODEL`. Request bodies are serialized ModelInferRequest messages built once
before the run (follower.loadgen.bodies, wire "grpc") without the model name; the session prefixes the serialized
`model_name` field (protobuf merges concatenated messages), so sending costs no per-request encoding. For a unary
call the response arrives whole: first byte = done = response received, the same four timestamps as HTTP.

This is our own client rather than tritonclient.grpc on purpose: one code path for our servers and Triton (both speak
the standard `inference.GRPCInferenceService`), and bodies serialized once instead of per call (tritonclient builds
and serializes a request per call). tritonclient.grpc can be imported beside our stubs (their package is ours, see
protos/grpc_predict_v2.proto) and is used where per-call cost does not matter: checking answers.
"""

from __future__ import annotations

import types
from typing import Any
from urllib.parse import urlsplit

import grpc
import orjson

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
    """(host:port, model name) of a grpc:// target."""
    parts = urlsplit(url)
    if parts.scheme != "grpc" or not parts.netloc or not parts.path.strip("/"):
        raise ValueError(f"not a gRPC model target (grpc://HOST:PORT/MODEL): {url!r}")
    return parts.netloc, parts.path.strip("/")


def model_prefix(model: str) -> bytes:
    """The serialized model_name field, prefixed to every body (a concatenation of messages is their merge)."""
    return pb.ModelInferRequest(model_name=model).SerializeToString()


def _identity(data: bytes) -> bytes:
    return data


class _Answer:
    """What `session.post` yields: the status and a payload whose only content the generator reads is parameters."""

    def __init__(self, status: int, payload: bytes) -> None:
        self.status = status
        self._payload = payload

    async def read(self) -> bytes:
        return self._payload

    async def __aenter__(self) -> _Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Call:
    """The awaitable context manager of one unary ModelInfer (the call runs in __aenter__)."""

    def __init__(self, session: GrpcSession, url: str, body: bytes) -> None:
        self.session, self.url, self.body = session, url, body

    async def __aenter__(self) -> _Answer:
        stub, prefix = self.session.target(self.url)
        try:
            response = await stub(prefix + self.body, timeout=self.session.timeout_s)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise TimeoutError(f"gRPC deadline of {self.session.timeout_s:g}s exceeded") from None
            if code == grpc.StatusCode.UNAVAILABLE and "connect" in (exc.details() or "").lower():
                raise ConnectionError(f"gRPC UNAVAILABLE: {exc.details()}") from None
            return _Answer(_STATUS.get(code, 500), f"gRPC {code.name}: {exc.details()}".encode())
        params = {k: v.int64_param for k, v in response.parameters.items() if v.WhichOneof("parameter_choice") == "int64_param"}
        # The HTTP path's parse_stage_timings reads a trailing "parameters" object; give it one.
        return _Answer(200, b'{"parameters":' + orjson.dumps(params) + b"}")

    async def __aexit__(self, *exc: object) -> None:
        return None


class GrpcSession:
    """A grpc.aio channel per target, looking like aiohttp's ClientSession to the generator (post, close, async with)."""

    def __init__(self, max_concurrency: int = 256, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._targets: dict[str, tuple[Any, bytes]] = {}

    def target(self, url: str) -> tuple[Any, bytes]:
        """The ModelInfer callable and the body prefix for a grpc:// URL (channels made once per address)."""
        found = self._targets.get(url)
        if found is None:
            address, model = parse_grpc_url(url)
            channel = self._channels.get(address)
            if channel is None:
                options = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]
                channel = self._channels[address] = grpc.aio.insecure_channel(address, options=options)
            stub = channel.unary_unary(INFER_METHOD, request_serializer=_identity,
                                       response_deserializer=pb.ModelInferResponse.FromString)  # fmt: skip
            found = self._targets[url] = (stub, model_prefix(model))
        return found

    def post(self, url: str, data: bytes, headers: Any = None) -> _Call:
        """One ModelInfer with the pre-serialized body `data`."""
        return _Call(self, url, data)

    async def close(self) -> None:
        """Close every channel."""
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._targets.clear()

    async def __aenter__(self) -> GrpcSession:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: types.TracebackType | None) -> None:
        await self.close()
