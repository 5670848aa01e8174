"""Anthropic's Messages API (/v1/messages): chat messages, a system prompt beside them, answers streamed as its own
events (follower/protocols/transports/llm_events.py). Spoken by Anthropic's service and by servers that offer it beside
the OpenAI API (vLLM). Every request carries the API version header it was written to; a key is a target's secret
(`x-api-key`). Readiness is the model list (/v1/models)."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

from follower.protocols.base import Endpoint, ServingProtocol
from follower.protocols.calls import get
from follower.protocols.transports import NO_CREDENTIALS, Credentials, Transport
from follower.protocols.transports.llm_events import MessagesStreamTransport

MESSAGES = "/v1/messages"
VERSION_HEADER = ("anthropic-version", "2023-06-01")  # the version whose streamed events the reader knows


def with_version(credentials: Credentials) -> Credentials:
    """The credentials with the API version header (unless the target's secret sets one)."""
    if any(name.lower() == VERSION_HEADER[0] for name, _ in credentials.headers):
        return credentials
    return dataclasses.replace(credentials, headers=(*credentials.headers, VERSION_HEADER))


class AnthropicMessages(ServingProtocol):
    name = "anthropic"
    llm = True
    streams = True
    stream_transport = MessagesStreamTransport

    def infer_url(self, endpoint: Endpoint) -> str:
        base = endpoint.base.rstrip("/")
        return base if base.endswith(MESSAGES) else f"{base}{MESSAGES}"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        get(urlsplit(self.infer_url(endpoint))._replace(path="/v1/models").geturl(), with_version(credentials))
        return True

    def open_transport(
        self,
        endpoint: Endpoint,
        *,
        max_concurrency: int,
        timeout_s: float,
        credentials: Credentials = NO_CREDENTIALS,
        raw_http: bool = True,
    ) -> Transport:
        return super().open_transport(
            endpoint,
            max_concurrency=max_concurrency,
            timeout_s=timeout_s,
            credentials=with_version(credentials),
            raw_http=raw_http,
        )
