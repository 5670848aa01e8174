"""The transports behind the load generator's one interface (base.Transport); each protocol (follower/protocols/)
opens the one its requests travel on."""

from __future__ import annotations

from follower.protocols.transports.aiohttp_client import AiohttpTransport
from follower.protocols.transports.base import NO_CREDENTIALS, Answer, Credentials, Reply, Transport
from follower.protocols.transports.grpc_client import GrpcTransport
from follower.protocols.transports.openai_stream import OpenAiStreamTransport
from follower.protocols.transports.rawhttp import RawHttpTransport

__all__ = [
    "NO_CREDENTIALS",
    "AiohttpTransport",
    "Answer",
    "Credentials",
    "GrpcTransport",
    "OpenAiStreamTransport",
    "RawHttpTransport",
    "Reply",
    "Transport",
]
