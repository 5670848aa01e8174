"""Anthropic's Messages API (/v1/messages): chat messages, a system prompt beside them, answers streamed as its own
events (follower/protocols/transports/llm_events.py). Spoken by Anthropic's service and by servers that offer it beside
the OpenAI API (vLLM). Every request carries the API version header it was written to (unless the target's secret
sets one); a key is a target's secret (`x-api-key`). Readiness is the model list (/v1/models)."""

from __future__ import annotations

from follower.protocols.openai import LlmApi
from follower.protocols.transports.llm_events import MessagesStreamTransport

VERSION_HEADER = ("anthropic-version", "2023-06-01")  # the version whose streamed events the reader knows


class AnthropicMessages(LlmApi):
    name = "anthropic"
    path = "/v1/messages"
    stream_transport = MessagesStreamTransport
    headers = (VERSION_HEADER,)
