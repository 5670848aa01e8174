"""The transports behind the load generator's one interface (base.Transport), and the choice of one for a URL."""

from __future__ import annotations

from urllib.parse import urlsplit

from follower.loadgen.transports.aiohttp_client import AiohttpTransport
from follower.loadgen.transports.base import NO_CREDENTIALS, Answer, Credentials, Reply, Transport
from follower.loadgen.transports.grpc_client import SCHEME as GRPC_SCHEME
from follower.loadgen.transports.grpc_client import GrpcTransport
from follower.loadgen.transports.openai_stream import OpenAiStreamTransport
from follower.loadgen.transports.rawhttp import RawHttpTransport

__all__ = ["NO_CREDENTIALS", "Answer", "Credentials", "Reply", "Transport", "open_transport"]


OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions")


def open_transport(url: str, *, max_concurrency: int, timeout_s: float, raw_http: bool = True,
                   credentials: Credentials = NO_CREDENTIALS) -> Transport:  # fmt: skip
    """The transport for `url`: gRPC for grpc://, the streaming OpenAI client for an OpenAI-compatible completions
    path, our raw HTTP/1.1 client for http:// (a fraction of aiohttp's CPU per request) unless `raw_http` is False,
    aiohttp otherwise (https://, and where per-request CPU does not matter). `credentials`: a target's headers and TLS
    checks, on every request."""
    if url.startswith("http://") and urlsplit(url).path.endswith(OPENAI_PATHS):
        return OpenAiStreamTransport(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
    if url.startswith((GRPC_SCHEME, "grpcs://")):
        return GrpcTransport(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
    if raw_http and url.startswith("http://"):
        return RawHttpTransport(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
    return AiohttpTransport(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)
