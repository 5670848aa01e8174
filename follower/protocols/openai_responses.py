"""OpenAI's Responses API (/v1/responses): the conversation as input items, answers streamed as its typed events
(follower/protocols/transports/llm_events.py); nothing stored on the server (`store: false`). Spoken by OpenAI's
service and by servers that offer it beside completions (vLLM)."""

from __future__ import annotations

from follower.protocols.openai import LlmApi
from follower.protocols.transports.llm_events import ResponsesStreamTransport


class OpenAiResponses(LlmApi):
    name = "openai-responses"
    path = "/v1/responses"
    stream_transport = ResponsesStreamTransport
