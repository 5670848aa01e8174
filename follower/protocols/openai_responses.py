"""OpenAI's Responses API (/v1/responses): the conversation as input items, answers streamed as its typed events
(follower/protocols/transports/llm_events.py); nothing stored on the server (`store: false`). Spoken by OpenAI's
service and by servers that offer it beside completions (vLLM). Readiness is the model list (/v1/models)."""

from __future__ import annotations

from urllib.parse import urlsplit

from follower.protocols.base import Endpoint, ServingProtocol
from follower.protocols.calls import get
from follower.protocols.transports import NO_CREDENTIALS, Credentials
from follower.protocols.transports.llm_events import ResponsesStreamTransport

RESPONSES = "/v1/responses"


class OpenAiResponses(ServingProtocol):
    name = "openai-responses"
    llm = True
    streams = True
    stream_transport = ResponsesStreamTransport

    def infer_url(self, endpoint: Endpoint) -> str:
        base = endpoint.base.rstrip("/")
        return base if base.endswith(RESPONSES) else f"{base}{RESPONSES}"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        get(urlsplit(self.infer_url(endpoint))._replace(path="/v1/models").geturl(), credentials)
        return True
