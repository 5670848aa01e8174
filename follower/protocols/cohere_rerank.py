"""Cohere's rerank API (/v1/rerank; the same schema as Cohere's /v2/rerank, Jina's and vLLM's /rerank): a query
and documents in, a relevance score per document out, answered whole. A target's URL ending in `rerank` is used as
it is; otherwise /v1/rerank at its origin. The streaming client reads the answer (a whole JSON answer too)."""

from __future__ import annotations

from follower.protocols.base import Endpoint
from follower.protocols.openai import LlmApi
from follower.protocols.transports.openai_stream import PooledTransport


class CohereRerank(LlmApi):
    stream_transport = PooledTransport
    name = "cohere-rerank"
    path = "/v1/rerank"

    def infer_url(self, endpoint: Endpoint) -> str:
        base = endpoint.base.rstrip("/")
        return base if base.endswith("rerank") else f"{base}{self.path}"
