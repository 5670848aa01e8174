"""An OpenAI-compatible completions API (vLLM, SGLang, Triton's OpenAI frontend, a team's own gateway): prompts to
/v1/completions or /v1/chat/completions, streamed back as server-sent events; readiness is the model list
(/v1/models). The endpoint's base is the completions URL itself: a server's, or the one a target names.

And what every language-model API's protocol shares (`LlmApi`: this one, Anthropic's Messages, OpenAI's Responses and
embeddings): one path at the server's origin, readiness on the model list, answers read by the streaming client, and
the server's Prometheus metrics at its origin (vLLM's, SGLang's, llama.cpp's, whichever API drives it)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar
from urllib.parse import urlsplit

from common.spec.llm import LlmWorkload
from common.spec.target import ProtocolName
from follower.protocols.base import Endpoint, ServingProtocol
from follower.protocols.calls import get
from follower.protocols.transports import NO_CREDENTIALS, Credentials

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
# The protocol module that speaks each of the other APIs an OpenAI-compatible server may serve.
OTHER_APIS: dict[str, ProtocolName] = {
    "messages": "anthropic",
    "responses": "openai-responses",
    "embeddings": "openai-embeddings",
    "rerank": "cohere-rerank",
}
MAX_METRICS_BYTES = 4 * 2**20  # vLLM's are ~100 KB; a larger answer is not read as metrics


class LlmApi(ServingProtocol):
    """A language-model API at `path` of a server's origin (or at the URL a target names, when it ends so)."""

    llm = True
    streams = True
    path: ClassVar[str]

    def infer_url(self, endpoint: Endpoint) -> str:
        base = endpoint.base.rstrip("/")
        return base if base.endswith(self.path) else f"{base}{self.path}"

    def at_origin(self, endpoint: Endpoint, path: str) -> str:
        """`path` at the server's origin."""
        return urlsplit(self.infer_url(endpoint))._replace(path=path, query="").geturl()

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        get(self.at_origin(endpoint, "/v1/models"), self.with_headers(credentials))
        return True

    def server_metrics(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> str | None:
        """The server's /metrics at its origin (None when larger than metrics are)."""
        answer = get(self.at_origin(endpoint, "/metrics"), credentials)
        return answer.text if len(answer.content) <= MAX_METRICS_BYTES else None


def completions_url(base: str) -> str:
    """A server's (or a target's) completions URL: as given when it names one, else the server's /v1/completions."""
    return base if base.endswith((COMPLETIONS, CHAT)) else f"{base}{COMPLETIONS}"


class OpenAi(LlmApi):
    name = "openai"
    path = COMPLETIONS

    def infer_url(self, endpoint: Endpoint) -> str:
        return completions_url(endpoint.base)

    def route(self, endpoint: Endpoint, workload: LlmWorkload | None) -> Endpoint:
        """The completions URL, its chat sibling for `api: chat`; for `api: messages`, `responses` and `embeddings`,
        the server's Anthropic Messages, OpenAI Responses or embeddings API at its origin (vLLM serves them all)."""
        if workload is None or workload.api == "completions":
            return endpoint
        if workload.api == "chat":
            return dataclasses.replace(endpoint, base=self.infer_url(endpoint).replace(COMPLETIONS, CHAT))
        origin = urlsplit(self.infer_url(endpoint))._replace(path="", query="").geturl()
        return dataclasses.replace(endpoint, protocol=OTHER_APIS[workload.api], base=origin)
