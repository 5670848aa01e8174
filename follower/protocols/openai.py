"""An OpenAI-compatible completions API (vLLM, SGLang, Triton's OpenAI frontend, a team's own gateway): prompts to
/v1/completions or /v1/chat/completions, streamed back as server-sent events; readiness is the model list
(/v1/models). The endpoint's base is the completions URL itself: a server's, or the one a target names."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

from common.spec.llm import LlmWorkload
from common.spec.target import ProtocolName
from follower.protocols.base import Endpoint, ServingProtocol
from follower.protocols.calls import get
from follower.protocols.transports import NO_CREDENTIALS, Credentials

COMPLETIONS = "/v1/completions"
# The protocol module that speaks each of the other APIs an OpenAI-compatible server may serve.
OTHER_APIS: dict[str, ProtocolName] = {
    "messages": "anthropic",
    "responses": "openai-responses",
    "embeddings": "openai-embeddings",
}
MAX_METRICS_BYTES = 4 * 2**20  # vLLM's are ~100 KB; a larger answer is not read as metrics
CHAT = "/v1/chat/completions"


def completions_url(base: str) -> str:
    """A server's (or a target's) completions URL: as given when it names one, else the server's /v1/completions."""
    return base if base.endswith((COMPLETIONS, CHAT)) else f"{base}{COMPLETIONS}"


class OpenAi(ServingProtocol):
    name = "openai"
    llm = True
    streams = True

    def infer_url(self, endpoint: Endpoint) -> str:
        return completions_url(endpoint.base)

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        get(urlsplit(self.infer_url(endpoint))._replace(path="/v1/models").geturl(), credentials)
        return True

    def server_metrics(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> str | None:
        """vLLM's, SGLang's and llama.cpp's /metrics at the endpoint's origin (vllm:*, sglang:*, llamacpp:*)."""
        answer = get(urlsplit(self.infer_url(endpoint))._replace(path="/metrics", query="").geturl(), credentials)
        return answer.text if len(answer.content) <= MAX_METRICS_BYTES else None

    def route(self, endpoint: Endpoint, workload: LlmWorkload | None) -> Endpoint:
        """The completions URL, its chat sibling for `api: chat`; for `api: messages`, `responses` and `embeddings`,
        the server's Anthropic Messages, OpenAI Responses or embeddings API at its origin (vLLM serves them all)."""
        if workload is None or workload.api == "completions":
            return endpoint
        if workload.api == "chat":
            return dataclasses.replace(endpoint, base=self.infer_url(endpoint).replace(COMPLETIONS, CHAT))
        origin = urlsplit(self.infer_url(endpoint))._replace(path="", query="").geturl()
        return dataclasses.replace(endpoint, protocol=OTHER_APIS[workload.api], base=origin)
