"""Anthropic's Messages API (/v1/messages): chat messages, a system prompt beside them, answers streamed as its own
events (follower/protocols/transports/llm_events.py). Spoken by Anthropic's service and by servers that offer it beside
the OpenAI API (vLLM). Every request carries the API version header it was written to; a key is a target's secret
(`x-api-key`). Readiness is the model list (/v1/models)."""

from __future__ import annotations

import dataclasses

from follower.protocols.base import Endpoint
from follower.protocols.openai import LlmApi
from follower.protocols.transports import NO_CREDENTIALS, Credentials, Transport
from follower.protocols.transports.llm_events import MessagesStreamTransport

VERSION_HEADER = ("anthropic-version", "2023-06-01")  # the version whose streamed events the reader knows


def with_version(credentials: Credentials) -> Credentials:
    """The credentials with the API version header (unless the target's secret sets one)."""
    if any(name.lower() == VERSION_HEADER[0] for name, _ in credentials.headers):
        return credentials
    return dataclasses.replace(credentials, headers=(*credentials.headers, VERSION_HEADER))


class AnthropicMessages(LlmApi):
    name = "anthropic"
    path = "/v1/messages"
    stream_transport = MessagesStreamTransport

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        return super().ready(endpoint, with_version(credentials))

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
