"""OpenAI's embeddings API (/v1/embeddings): texts in, vectors out, answered whole (no stream). Spoken by OpenAI's
service and by servers that offer it (vLLM started as a pooling model, llama.cpp with --embeddings). The streaming
client reads the answer (a JSON answer is read whole there too) for the server's own count of the prompt tokens
(`usage.prompt_tokens`). Readiness is the model list (/v1/models)."""

from __future__ import annotations

from urllib.parse import urlsplit

from follower.protocols.base import Endpoint, ServingProtocol
from follower.protocols.calls import get
from follower.protocols.transports import NO_CREDENTIALS, Credentials

EMBEDDINGS = "/v1/embeddings"


class OpenAiEmbeddings(ServingProtocol):
    name = "openai-embeddings"
    llm = True
    streams = True  # read by the streaming client, which takes a whole JSON answer and its usage as well

    def infer_url(self, endpoint: Endpoint) -> str:
        base = endpoint.base.rstrip("/")
        return base if base.endswith(EMBEDDINGS) else f"{base}{EMBEDDINGS}"

    def ready(self, endpoint: Endpoint, credentials: Credentials = NO_CREDENTIALS) -> bool:
        get(urlsplit(self.infer_url(endpoint))._replace(path="/v1/models").geturl(), credentials)
        return True
