"""Each protocol in its own module: the URLs its requests go to, its registry entry, the endpoint a target becomes
(named explicitly: nothing encoded into a URL), the route of an LLM workload, and the transport each one opens."""

from __future__ import annotations

import asyncio
from typing import get_args

import orjson
import pytest

from common.spec.llm import LlmWorkload
from common.spec.target import LLM_APIS, ProtocolName, TargetSpec
from follower.backends.endpoint import target_endpoint
from follower.protocols import PROTOCOLS, Endpoint, protocol_of
from follower.protocols.transports import AiohttpTransport, GrpcTransport, OpenAiStreamTransport, RawHttpTransport


def url(target: TargetSpec, model: str = "m") -> str:
    endpoint = target_endpoint(target, model)
    return protocol_of(endpoint).infer_url(endpoint)


def test_every_protocol_name_has_one_module() -> None:
    assert sorted(PROTOCOLS) == sorted(get_args(ProtocolName))
    assert all(name == protocol.name for name, protocol in PROTOCOLS.items())
    # the language-model protocols are the spec's (each with the llm.api it speaks)
    assert sorted(name for name, protocol in PROTOCOLS.items() if protocol.llm) == sorted(LLM_APIS)


def test_urls_the_load_goes_to() -> None:
    assert url(TargetSpec(url="http://h:8000/", protocol="kserve-http")) == "http://h:8000/v2/models/m/infer"
    versioned = TargetSpec(url="https://h", protocol="tfserving-rest", model_version="3")
    assert url(versioned) == "https://h/v1/models/m/versions/3:predict"
    assert url(TargetSpec(url="grpc://h:8001", protocol="kserve-grpc", model_name="other")) == "grpc://h:8001/other"
    assert url(TargetSpec(url="grpc://h:8001", protocol="kserve-grpc", model_version="2")) == "grpc://h:8001/m/versions/2"
    assert url(TargetSpec(url="grpcs://h:8500", protocol="tfserving-grpc")) == "grpcs://h:8500/m"
    assert url(TargetSpec(url="http://h:8000", protocol="openai")) == "http://h:8000/v1/completions"
    chat = TargetSpec(url="http://h/v1/chat/completions", protocol="openai")
    assert url(chat) == "http://h/v1/chat/completions"
    assert url(TargetSpec(url="https://api.example", protocol="anthropic")) == "https://api.example/v1/messages"
    assert url(TargetSpec(url="http://h:8000", protocol="openai-responses")) == "http://h:8000/v1/responses"
    assert url(TargetSpec(url="http://h:8000/v1/embeddings", protocol="openai-embeddings")) == "http://h:8000/v1/embeddings"
    assert url(TargetSpec(url="http://h:1", protocol="kserve-http"), "a b") == "http://h:1/v2/models/a%20b/infer"


def test_a_target_becomes_an_endpoint_of_its_protocol() -> None:
    target = TargetSpec(url="grpcs://h:8500", protocol="tfserving-grpc", model_name="served", model_version="canary")
    endpoint = target_endpoint(target, "job-model")
    assert endpoint == Endpoint("tfserving-grpc", "grpcs://h:8500", "served", "canary")
    assert endpoint.tls and endpoint.address == "h:8500"


def test_an_llm_workload_routes_chat_to_its_sibling_url() -> None:
    openai = PROTOCOLS["openai"]
    server = Endpoint("openai", "http://h:8000", "llm")
    assert openai.infer_url(openai.route(server, LlmWorkload(api="chat"))) == "http://h:8000/v1/chat/completions"
    assert openai.route(server, LlmWorkload()) == server
    assert openai.route(server, None) == server
    tensor = Endpoint("kserve-http", "http://h:8000", "m")
    assert PROTOCOLS["kserve-http"].route(tensor, LlmWorkload(api="chat")) == tensor


def test_tensor_bodies_in_each_rest_protocols_format() -> None:
    entries: list[dict[str, object]] = [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]
    assert orjson.loads(PROTOCOLS["kserve-http"].encode(entries)) == {"inputs": entries}
    assert orjson.loads(PROTOCOLS["tfserving-rest"].encode(entries)) == {"inputs": {"x": [[1.0, 2.0]]}}
    with pytest.raises(ValueError, match="openai takes no tensor requests"):
        PROTOCOLS["openai"].encode(entries)


@pytest.mark.parametrize(
    ("endpoint", "raw_http", "kind"),
    [
        (Endpoint("kserve-http", "http://127.0.0.1:1", "m"), True, RawHttpTransport),
        (Endpoint("kserve-http", "http://127.0.0.1:1", "m"), False, AiohttpTransport),
        (Endpoint("tfserving-rest", "https://127.0.0.1:1", "m"), True, AiohttpTransport),
        (Endpoint("kserve-grpc", "grpc://127.0.0.1:1", "m"), True, GrpcTransport),
        (Endpoint("tfserving-grpc", "grpc://127.0.0.1:1", "m"), True, GrpcTransport),
        (Endpoint("openai", "http://127.0.0.1:1", "m"), False, OpenAiStreamTransport),
        (Endpoint("openai", "https://127.0.0.1:1", "m"), True, AiohttpTransport),
    ],
)
def test_each_protocol_opens_its_transport(endpoint: Endpoint, raw_http: bool, kind: type) -> None:
    async def opened() -> type:
        transport = protocol_of(endpoint).open_transport(endpoint, max_concurrency=1, timeout_s=1.0, raw_http=raw_http)
        try:
            return type(transport)
        finally:
            await transport.close()

    assert asyncio.run(opened()) is kind


def test_a_tls_context_is_made_once_per_bundle_and_choice() -> None:
    """Loading the system's CAs takes ~50 ms: a pass of one-off calls (a quality check's answers) must not pay it per
    call (it made the pass 24x slower, bench/quality.py); a different bundle or choice still gets its own context."""
    import ssl

    from follower.protocols.transports import Credentials

    checked = Credentials(headers=(("Authorization", "Bearer x"),)).ssl_context()
    assert Credentials().ssl_context() is checked  # headers do not change how the certificate is checked
    unchecked = Credentials(verify=False).ssl_context()
    assert unchecked is not checked and unchecked.verify_mode == ssl.CERT_NONE and checked.verify_mode == ssl.CERT_REQUIRED
