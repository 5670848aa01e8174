"""OpenAI's embeddings API (/v1/embeddings): texts in, vectors out, answered whole (no stream). Spoken by OpenAI's
service and by servers that offer it (vLLM started as a pooling model, llama.cpp with --embeddings). The streaming
client reads the answer (it takes a whole JSON answer too) for the server's own count of the prompt tokens
(`usage.prompt_tokens`)."""

from __future__ import annotations

from follower.protocols.openai import LlmApi
from follower.protocols.transports.openai_stream import PooledTransport


class OpenAiEmbeddings(LlmApi):
    stream_transport = PooledTransport
    name = "openai-embeddings"
    path = "/v1/embeddings"
