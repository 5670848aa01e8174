"""The serving protocols, one module each (URL, readiness, metadata, bodies, transport), in one registry: a new
protocol is one new module and one line here (and its name in common/spec/target.py's ProtocolName)."""

from __future__ import annotations

from common.spec.target import ProtocolName
from follower.protocols.anthropic import AnthropicMessages
from follower.protocols.base import Endpoint, ServingProtocol
from follower.protocols.calls import EndpointError, EndpointRefused, session
from follower.protocols.cohere_rerank import CohereRerank
from follower.protocols.kserve_grpc import KserveGrpc
from follower.protocols.kserve_http import KserveHttp
from follower.protocols.openai import OpenAi
from follower.protocols.openai_embeddings import OpenAiEmbeddings
from follower.protocols.openai_responses import OpenAiResponses
from follower.protocols.tfserving_grpc import TfservingGrpc
from follower.protocols.tfserving_rest import TfservingRest
from follower.protocols.transports import NO_CREDENTIALS, Credentials, Transport

PROTOCOLS: dict[ProtocolName, ServingProtocol] = {
    p.name: p
    for p in (
        KserveHttp(),
        KserveGrpc(),
        TfservingRest(),
        TfservingGrpc(),
        OpenAi(),
        AnthropicMessages(),
        OpenAiResponses(),
        OpenAiEmbeddings(),
        CohereRerank(),
    )
}


def protocol_of(endpoint: Endpoint) -> ServingProtocol:
    """The protocol module that speaks to `endpoint`."""
    return PROTOCOLS[endpoint.protocol]


def infer_url(endpoint: Endpoint) -> str:
    """Where the endpoint's requests go, as its protocol writes it."""
    return protocol_of(endpoint).infer_url(endpoint)


__all__ = [
    "NO_CREDENTIALS",
    "PROTOCOLS",
    "Credentials",
    "Endpoint",
    "EndpointError",
    "EndpointRefused",
    "ServingProtocol",
    "Transport",
    "infer_url",
    "protocol_of",
    "session",
]
