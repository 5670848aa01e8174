"""What every serving protocol answers for the follower, and the endpoint it answers about.

A protocol (KServe v2 over HTTP or gRPC, TF Serving's REST or gRPC API, an OpenAI-compatible completions API) is one
module of this folder: where its requests go, how readiness and the model's signature are asked, how a request body
is encoded, and which transport carries it. An `Endpoint` names its protocol explicitly, as httpx passes a transport
in: nothing is encoded into a URL or sniffed back out of one.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

import numpy as np

from common.spec.llm import LlmWorkload
from common.spec.target import ProtocolName
from common.wire.models import TensorSpec
from follower.protocols.transports import (
    NO_CREDENTIALS,
    AiohttpTransport,
    Credentials,
    GrpcTransport,
    OpenAiStreamTransport,
    RawHttpTransport,
    Transport,
)


@dataclass(frozen=True)
class Endpoint:
    """A model served somewhere: the protocol that speaks to it, the server's base URL (scheme://host:port, or for an
    OpenAI-compatible server the completions URL itself), the model's name there and the version asked for (None:
    the server's default)."""

    protocol: ProtocolName
    base: str
    model: str = ""
    version: str | None = None

    @property
    def tls(self) -> bool:
        return urlsplit(self.base).scheme in ("https", "grpcs")

    @property
    def address(self) -> str:
        """host:port, as a gRPC channel takes it."""
        return urlsplit(self.base).netloc

    def model_path(self) -> str:
        """`NAME[/versions/V]`, URL-quoted: how the HTTP protocols name the model in their paths."""
        version = f"/versions/{quote(self.version, safe='')}" if self.version else ""
        return quote(self.model, safe="") + version


# One tensor of a request before encoding: name, datatype (KServe v2), shape, data (flat values).
Entry = dict[str, object]


class ServingProtocol(ABC):
    """One protocol's answers; the registry (follower/protocols/__init__.py) holds one instance of each."""

    name: ClassVar[ProtocolName]
    #: Whether its requests are a language model's (prompts and token streams) rather than tensors.
    llm: ClassVar[bool] = False
    #: Whether its answers are streams of events, each timed as it arrives.
    streams: ClassVar[bool] = False
    #: The streaming client that reads its events (over plain HTTP), where its answers stream.
    stream_transport: ClassVar[type[Transport]] = OpenAiStreamTransport
    #: Headers every request of the protocol carries (an API version), unless a target's secret sets its own.
    headers: ClassVar[tuple[tuple[str, str], ...]] = ()

    def with_headers(self, credentials: Credentials) -> Credentials:
        """The credentials with the protocol's own headers added, those the target's secret sets left as it sets them."""
        named = {name.lower() for name, _ in credentials.headers}
        extra = tuple(h for h in self.headers if h[0].lower() not in named)
        return dataclasses.replace(credentials, headers=(*credentials.headers, *extra)) if extra else credentials

    @abstractmethod
    def infer_url(self, endpoint: Endpoint) -> str:
        """Where the requests go, as logs and results name it."""

    @abstractmethod
    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        """Whether the server says the model is ready; EndpointError when the question goes unanswered."""

    def signature(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> list[TensorSpec] | None:
        """The model's inputs as the server describes them; None for a protocol without metadata."""
        return None

    def describe(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> str | None:
        """The server's own name and version, where the protocol has a way to ask (None otherwise)."""
        return None

    def server_metrics(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> str | None:
        """The server's Prometheus metrics text, where its protocol's servers keep it in a known place (None
        otherwise); EndpointError when it does not answer."""
        return None

    def route(self, endpoint: Endpoint, workload: LlmWorkload | None) -> Endpoint:
        """Where a point with this LLM workload sends its requests (the same endpoint, unless the protocol routes by
        the workload's API)."""
        return endpoint

    def encode(self, entries: Sequence[Entry]) -> bytes:
        """One request's tensors in this protocol's body format."""
        raise ValueError(f"protocol {self.name} takes no tensor requests")

    def outputs(self, endpoint: Endpoint, body: bytes, credentials: Credentials = NO_CREDENTIALS) -> dict[str, np.ndarray]:
        """Send one encoded request (a body `encode` made) outside any load, and decode its answer's output tensors by
        name: what a client's own post-processing reads (follower/point/postprocess.py)."""
        raise ValueError(f"protocol {self.name} answers no tensors")

    def open_transport(
        self,
        endpoint: Endpoint,
        *,
        max_concurrency: int,
        timeout_s: float,
        credentials: Credentials = NO_CREDENTIALS,
        raw_http: bool = True,
    ) -> Transport:
        """The transport that carries this protocol's requests to `endpoint` (by default: HTTP to its infer URL): for
        plain http://, our streaming client where answers are token streams (every event timed), else our raw HTTP/1.1
        client unless `raw_http` is False (a fraction of aiohttp's CPU per request); aiohttp otherwise (https://, and
        where per-request CPU does not matter; it reads a stream whole)."""
        url = self.infer_url(endpoint)
        plain = urlsplit(url).scheme == "http"
        credentials = self.with_headers(credentials)
        kind: type[Transport] = AiohttpTransport
        if plain and self.streams:
            kind = self.stream_transport
        elif plain and raw_http:
            kind = RawHttpTransport
        return kind(url, max_concurrency=max_concurrency, timeout_s=timeout_s, credentials=credentials)


class GrpcProtocol(ServingProtocol):
    """A protocol of unary gRPC calls: one `method` per request, answered by `answer_type`; each body is sent behind
    the serialized model fields (`prefix`), which protobuf merges into one request."""

    method: ClassVar[str]
    answer_type: ClassVar[Any]

    @abstractmethod
    def prefix(self, endpoint: Endpoint) -> bytes:
        """The serialized model fields, prefixed to every body (a concatenation of messages is their merge)."""

    def stages(self, answer: Any) -> Mapping[str, Any] | None:
        """The server's stage timings (ns) an answer carries, if the protocol has a place for them."""
        return None

    def open_transport(
        self,
        endpoint: Endpoint,
        *,
        max_concurrency: int,
        timeout_s: float,
        credentials: Credentials = NO_CREDENTIALS,
        raw_http: bool = True,
    ) -> Transport:
        """A gRPC channel to the endpoint (`raw_http` does not apply)."""
        return GrpcTransport(
            endpoint.address,
            tls=endpoint.tls,
            method=self.method,
            answer_type=self.answer_type,
            prefix=self.prefix(endpoint),
            stages=self.stages,
            max_concurrency=max_concurrency,
            timeout_s=timeout_s,
            credentials=credentials,
        )
