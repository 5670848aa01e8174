"""An endpoint a team already runs, as a job's target: where it is, the protocol it speaks, the secret that opens it,
and how many followers drive it at once (load shards)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from common import egress
from common.base import NAME_PATTERN, StrictModel

ENDPOINT = "endpoint"  # the backend name of a job that drives a target: no server is started
MAX_SHARDS = 64

# The protocols a target (or a server benchfleet starts) speaks: each is one module of follower/protocols/.
ProtocolName = Literal[
    "kserve-http",
    "kserve-grpc",
    "tfserving-rest",
    "tfserving-grpc",
    "openai",
    "anthropic",
    "openai-responses",
    "openai-embeddings",
    "cohere-rerank",
]
# The language-model protocols, and the llm.api each speaks (an OpenAI-compatible server may serve them all).
LLM_APIS: dict[str, tuple[str, ...]] = {
    "openai": ("completions", "chat", "messages", "responses", "embeddings", "rerank"),
    "anthropic": ("messages",),
    "openai-responses": ("responses",),
    "openai-embeddings": ("embeddings",),
    "cohere-rerank": ("rerank",),
}
# What tensor requests speak unless a server says otherwise: KServe v2 (the Open Inference Protocol) over HTTP.
DEFAULT_PROTOCOL: ProtocolName = "kserve-http"
# What a run measured by another tool and imported is described as speaking: the LLM clients drive an OpenAI-compatible
# API; perf_analyzer and LoadGen's tensor runs are written as KServe v2 (the files do not say which protocol ran).
IMPORTED_PROTOCOL: dict[str, ProtocolName] = {"llm": "openai", "tensor": DEFAULT_PROTOCOL}
# The URL schemes each protocol's endpoint is written with.
SCHEMES: dict[ProtocolName, tuple[str, ...]] = {
    "kserve-http": ("http", "https"),
    "tfserving-rest": ("http", "https"),
    "openai": ("http", "https"),
    "anthropic": ("http", "https"),
    "openai-responses": ("http", "https"),
    "openai-embeddings": ("http", "https"),
    "cohere-rerank": ("http", "https"),
    "kserve-grpc": ("grpc", "grpcs"),
    "tfserving-grpc": ("grpc", "grpcs"),
}


class ShardSpec(StrictModel):
    """Several followers drive each point at once, each its own seeded share of the arrivals, all from one instant;
    their records are merged into one point. `shards: 4` is short for `shards: {count: 4}`, `shards: auto` for
    `shards: {count: auto}`."""

    count: Annotated[int, Field(ge=1, le=MAX_SHARDS)] | Literal["auto"] = 1
    """Followers that drive every point together (1: one follower, no sharding); `auto`: as many as the peak rate
    needs at the chosen followers' generator cost per request, decided at submission."""
    labels: dict[Annotated[str, Field(pattern=NAME_PATTERN)], Annotated[str, Field(pattern=NAME_PATTERN)]] = {}
    """Only followers carrying every one of these labels drive the shards, e.g. {zone: zone-a}."""

    @model_validator(mode="before")
    @classmethod
    def _from_count(cls, data: Any) -> Any:
        return {"count": data} if (isinstance(data, int) and not isinstance(data, bool)) or data == "auto" else data

    @property
    def n(self) -> int:
        """The number of shards (an `auto` count not decided yet counts as 1)."""
        return self.count if isinstance(self.count, int) else 1


class TargetSpec(StrictModel):
    """An endpoint benchmarked as it runs: nothing is started, so no cold start is claimed."""

    url: Annotated[str, Field(min_length=8, max_length=2048)]
    """The endpoint's base URL: http(s)://host:port for HTTP protocols, grpc(s)://host:port for gRPC ones."""
    protocol: ProtocolName
    """What the endpoint speaks: KServe v2 over HTTP or gRPC, TF Serving's REST or gRPC API, an OpenAI-compatible
    API (completions, chat, and where it serves them Anthropic's messages and OpenAI's responses: llm.api), Anthropic's
    Messages API, or OpenAI's Responses API."""
    model_name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    """The model's name at the endpoint (default: the job's model name)."""
    model_version: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,32}$")] | None = None
    """The model version the endpoint serves to ask for (KServe: /versions/V or the request's model_version; TF
    Serving: /versions/V, or /labels/V when V is not a number; over gRPC the model spec's version, or its version
    label when V is not a number)."""
    secret: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    """A stored secret (POST /api/v1/secrets) sent as a header with every request, e.g. an API key."""
    verify_tls: bool = True
    """Check the endpoint's TLS certificate (https, grpcs)."""
    ca_bundle: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    """A stored secret holding the PEM CA bundle the certificate is checked against (default: the system's)."""
    shards: ShardSpec = ShardSpec()
    """Followers that drive each point together (load shards)."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not hold credentials: store them as a secret and name it in target.secret")
        if not parts.hostname or parts.query or parts.fragment:
            raise ValueError("must be scheme://host[:port][/path], with no query or fragment")
        try:
            parts.port  # noqa: B018 - a port out of range raises here
        except ValueError as exc:
            raise ValueError(f"has a bad port: {exc}") from None
        if re.search(r"[\s\x00-\x1f]", value):
            raise ValueError("must not hold spaces or control characters")
        if (why := egress.refusal(parts.hostname)) is not None:
            raise ValueError(why)
        return value.rstrip("/")

    @model_validator(mode="after")
    def _scheme_fits_protocol(self) -> TargetSpec:
        scheme = urlsplit(self.url).scheme
        if scheme not in SCHEMES[self.protocol]:
            wanted = " or ".join(SCHEMES[self.protocol])
            raise ValueError(f"url: protocol {self.protocol} needs a {wanted}:// URL, not {scheme}://")
        if self.ca_bundle is not None and scheme not in ("https", "grpcs"):
            raise ValueError("ca_bundle checks a TLS certificate: it needs an https:// or grpcs:// url")
        return self

    @property
    def is_llm(self) -> bool:
        """An OpenAI-compatible, Anthropic Messages or OpenAI Responses endpoint serves a language model."""
        return self.protocol in LLM_APIS

    @property
    def cost_key(self) -> str:
        """How followers key what a request to this target costs their generator (`protocol url`)."""
        return f"{self.protocol} {self.url}"

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme in ("https", "grpcs")

    def check_job(self, fields: dict[str, Any]) -> None:
        """What a job driving this target may not ask for (`fields`: the job's other fields, as validated)."""
        if fields.get("backends") not in (None, [ENDPOINT]):
            raise ValueError(f"a job with a target starts no server: its backends must be [{ENDPOINT}] (or left out)")
        for name in ("colocate", "network", "split"):
            if fields.get(name) is not None:
                raise ValueError(f"{name} needs a server benchfleet starts; a target is one it does not")
        repeats = fields.get("repeats")
        if repeats is not None and repeats.fresh_server:
            raise ValueError("repeats.fresh_server restarts a server benchfleet starts; a target is one it does not")
        llm = fields.get("llm")
        if llm is not None and not self.is_llm:
            raise ValueError(f"llm describes a language model's requests: it needs protocol {' or '.join(LLM_APIS)}")
        if llm is not None and llm.api not in LLM_APIS[self.protocol]:
            raise ValueError(f"protocol {self.protocol} speaks llm.api {' or '.join(LLM_APIS[self.protocol])}, not {llm.api}")
        if self.shards.count != 1:
            self._check_shards(fields)

    def _check_shards(self, fields: dict[str, Any]) -> None:
        load = fields.get("load")
        if load is not None and load.pattern == "closed":
            raise ValueError("shards split an open loop's arrivals; a closed loop has none (use one follower)")
        if load is not None and (load.search is not None or load.stability is not None):
            raise ValueError(
                "shards run each point for its set duration: load.search and load.stability are one follower's decisions"
            )


def default_backends(data: Any) -> Any:
    """A job with a target runs the `endpoint` backend unless it names backends (then checked by check_job)."""
    if isinstance(data, dict) and data.get("target") is not None and "backends" not in data:
        return {**data, "backends": [ENDPOINT]}
    return data
